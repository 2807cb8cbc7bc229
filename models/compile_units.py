"""Compiling a family's units in place, and the inductor tunings a family may offer as an option (Pi0.5's
`compile_tuning`). Which modules are units is the family's (its `compile` option's modes); how they compile is
this one function, for every family.

A unit is compiled with `nn.Module.compile` (names, parameters and state dict unchanged, so recompute wrappers,
checkpoints and DDP see the same module) and `fullgraph=True`, so that a graph break is an error rather than a
silent split.
"""

from __future__ import annotations

from typing import Literal

from torch import nn

CompileTuning = Literal["default", "coordinate-descent", "max-autotune-gemm"]

# The inductor options of each tuning. coordinate-descent: its generated kernels' block sizes refined by
# benchmarking. max-autotune-gemm: each GEMM shape benchmarked among cuBLAS and inductor's Triton GEMM templates (the
# persistent TMA ones on Hopper too), with the pointwise work after a template fused into its epilogue and kept only
# where the fused kernel beats the GEMM and a separate one: where the GELU and its backward could stop writing and
# re-reading the MLPs' widest tensors, if a Triton GEMM keeps up with cuBLAS
COMPILE_TUNING: dict[str, dict] = {
    "default": {},
    "coordinate-descent": {"coordinate_descent_tuning": True},
    "max-autotune-gemm": {
        "max_autotune_gemm": True,
        "max_autotune_gemm_backends": "ATEN,TRITON",
        "triton.enable_persistent_tma_matmul": True,
    },
}


def compile_units(
    units: dict[str, nn.Module], backend: str = "inductor", tuning: CompileTuning = "default"
) -> list[str]:
    """Compile every unit in place with `backend`, with the tuning's inductor options (the inductor backend only:
    other backends generate no kernels to tune); returns the units' names."""
    tuned = COMPILE_TUNING[tuning] if backend == "inductor" else {}
    options = {"options": tuned} if tuned else {}
    for module in units.values():
        module.compile(backend=backend, fullgraph=True, **options)
    return list(units)


__all__ = ["COMPILE_TUNING", "CompileTuning", "compile_units"]
