"""What the harness knows about each torch backend (cpu, cuda, npu), in one table: one frozen `Backend` per
backend. Targets (harness/machine/hardware.py) name a backend; the device abstraction, the process group
(harness/ladder/distributed.py), the machine probe (harness/machine/probe.py) and the rung processes' environment read its
facts here. A new backend is one entry below.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Backend:
    name: str  # torch's device type
    # the torch submodule with the torch.cuda-style API (synchronize, Event, memory statistics, device names);
    # None: the host (timed with the host clock, memory as the process's peak resident set)
    api: str | None
    extension: str | None  # the module that registers the backend with torch, imported only when asked for
    extra: str | None  # the vlabench extra that installs the extension (its hint: models.extras.pip_install)
    process_group: str  # torch.distributed's backend for data-parallel rungs
    set_device_per_rank: bool  # each rank selects its local device before the process group starts
    # allocator settings put into each rung process's environment (before torch starts): expandable segments
    # let the caching allocator grow blocks instead of fragmenting on a ladder whose rungs change shapes
    allocator_env: tuple[tuple[str, str], ...]
    # the machine probe (harness/machine/probe.py): a square matmul of this size in this dtype, repeated to last about
    # probe_s seconds
    probe_dtype: str  # "fp32" | "bf16"
    probe_size: int
    probe_s: float

    @property
    def accelerator(self) -> bool:
        return self.api is not None

    @property
    def torch_probe_dtype(self) -> torch.dtype:
        return {"fp32": torch.float32, "bf16": torch.bfloat16}[self.probe_dtype]

    def torch_api(self):
        """torch.cuda / torch.npu (after its extension is imported), or None on the host."""
        return None if self.api is None else getattr(torch, self.api)


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("cpu", None, None, None, "gloo", False, (), "fp32", 256, 0.025),
        Backend("cuda", "cuda", None, None, "nccl", True, (), "bf16", 4096, 0.005),
        Backend(
            "npu",
            "npu",
            "torch_npu",
            "npu",
            "hccl",
            False,
            (("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True"),),
            "bf16",
            4096,
            0.005,
        ),
    )
}


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; expected {', '.join(BACKENDS)}")
    return BACKENDS[name]


__all__ = ["BACKENDS", "Backend", "get_backend"]
