"""FP8 training linears (the `linear: fp8` option) through torchao's float8 training.

torchao swaps an nn.Linear for a Float8Linear that casts its input, weight and output gradient to
float8 with dynamic scales and runs the three GEMMs of forward and backward on FP8 tensor cores,
accumulating in higher precision; the weights and optimizer state stay in the model dtype.
Which linears are worth converting is decided here by shape and name, for any model.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, get_args

from torch import nn

from .extras import SetupError, pip_install
from .recompute import name_matches

# A family's `linear` option: its selected linears train in the model's dtype, or in FP8 (apply_fp8)
LinearKind = Literal["bf16", "fp8"]
# tensorwise: one scale per tensor, cuBLAS FP8 GEMM (fastest); rowwise: one scale per row, CUTLASS (more accurate)
Fp8Recipe = Literal["tensorwise", "rowwise"]
RECIPES = get_args(Fp8Recipe)

# A linear is converted only when both its sides have at least this many features. FP8 halves the
# GEMM time but adds casts that read and write the input, weight and gradient (plus an amax reduction
# each); the GEMM's work per cast element grows with the smaller side, so thin GEMMs (MQA's K/V
# projections to 256 features, 32-dim action projections) lose more to the casts than they gain.
# torchao's own H100 tables put the break-even around 1-2k features.
MIN_FEATURES = 1024

# FP8 GEMMs need every dimension to be a multiple of 16 (torch._scaled_mm's alignment).
ALIGNMENT = 16


def fp8_filter(min_features: int = MIN_FEATURES, skip=()):
    """The rule, as torchao's `module_filter_fn(module, name) -> bool`: a plain nn.Linear (not a
    subclass such as an already converted one; convolutions like a ViT patch embedding never match)
    whose in and out features are multiples of 16 and at least `min_features`, and whose dotted name
    matches none of the `skip` patterns (segment-wise globs as for recompute: `time_mlp.*`)."""

    def keep(module: nn.Module, name: str) -> bool:
        if type(module) is not nn.Linear:
            return False
        if any(name_matches(name, pattern) for pattern in skip):
            return False
        sides = (module.in_features, module.out_features)
        return all(n % ALIGNMENT == 0 and n >= min_features for n in sides)

    return keep


def fp8_candidates(model: nn.Module, min_features: int = MIN_FEATURES, skip=()) -> list[str]:
    """Names of the linears `apply_fp8` would convert, in module order (no torchao needed)."""
    keep = fp8_filter(min_features, skip)
    return [name for name, module in model.named_modules() if name and keep(module, name)]


def apply_fp8(
    model: nn.Module, recipe: str, min_features: int = MIN_FEATURES, skip=(), emulate: bool = False
) -> list[str]:
    """Convert the selected linears of `model` in place to torchao Float8Linear; returns their names.

    recipe: "tensorwise" (one scale per tensor, cuBLAS FP8 GEMM: fastest) or "rowwise" (one scale
    per row, CUTLASS GEMM: more accurate). emulate: cast to float8 but multiply in high precision,
    for checking numerics where there are no FP8 tensor cores (CPU tests); no speed-up.
    Apply it before recompute or compile wrappers, which change the module names `skip` sees.
    """
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError as err:
        raise SetupError(f"the fp8 rung needs torchao: install vlabench[fp8]: {pip_install('fp8')}") from err
    if recipe not in RECIPES:
        raise ValueError(f"unknown fp8 recipe {recipe!r}; expected one of {', '.join(RECIPES)}")
    if isinstance(model, nn.Linear):
        raise ValueError("apply_fp8 converts the linears inside a model in place; got a bare nn.Linear")
    config = Float8LinearConfig.from_recipe_name(recipe)
    if emulate:
        config = dataclasses.replace(config, emulate=True)
    names = fp8_candidates(model, min_features, skip)
    chosen = set(names)
    convert_to_float8_training(model, config=config, module_filter_fn=lambda module, name: name in chosen)
    return names
