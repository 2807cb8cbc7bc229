"""Hardware targets (what a scenario can run on) and a small device abstraction over cpu, cuda and npu.

A target names a kind of machine and the figures tables need from it (peak FLOP/s for MFU, memory);
a `Device` is the live backend the runner times and measures on. What each backend is (its torch API, process
group, allocator settings, probe kernel) is read from the one table in harness/machine/backends.py.
"""

from __future__ import annotations

import importlib
import importlib.util
import platform
import resource
import sys
import time
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from models.extras import SetupError, pip_install

from .backends import BACKENDS, get_backend

# Capabilities a rung may `require`; a target lacking one records the rung as unsupported.
# multi-process: the rung runs in several data-parallel processes (`vlabench run --nproc N`, N > 1)
Capability = Literal["fp8", "flex-backward", "compile", "multi-process"]
KNOWN_CAPABILITIES = frozenset(get_args(Capability))


@dataclass(frozen=True)
class Target:
    name: str
    backend: str  # a key of harness.machine.backends.BACKENDS: "cpu" | "cuda" | "npu"
    # substrings of the torch device name identifying it (any one matches); empty = the backend's generic target
    device_match: tuple[str, ...]
    peak_bf16_flops: float | None  # dense, per device; None where no honest figure exists
    peak_fp8_flops: float | None
    peak_source: str
    memory_gib: float | None
    capabilities: frozenset[str]


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        # FlexAttention has no CPU backward, fp8 linears need a GPU; MFU on a CPU would be noise.
        Target("cpu", "cpu", (), None, None, "no peak: CPU runs are functional checks", None, frozenset({"compile"})),
        # The datasheet quotes 1979 (bf16) / 3958 (fp8) TFLOP/s with 2:4 sparsity; dense is half.
        # NVIDIA's "141 GB" is the nominal HBM3e size; the driver reports slightly less as usable.
        Target(
            "h200",
            "cuda",
            ("H200",),
            989e12,
            1979e12,
            "NVIDIA H200 SXM datasheet, dense",
            141.0,
            frozenset({"fp8", "flex-backward", "compile"}),
        ),
        # H100 SXM5 80GB (torch names it "NVIDIA H100 80GB HBM3"): the same tensor-core peaks as the H200 by
        # NVIDIA's datasheet (989 bf16 / 1979 fp8 TFLOP/s dense, half the 2:4-sparse figures), 80 GB of HBM3
        # at 3.35 TB/s against the H200's 141 GB at 4.8. The PCIe and NVL cards have lower clocks and peaks
        # and other names: they fall to the generic `cuda` target rather than borrow these figures.
        Target(
            "h100",
            "cuda",
            ("H100 80GB HBM3",),
            989e12,
            1979e12,
            "NVIDIA H100 SXM datasheet, dense",
            80.0,
            frozenset({"fp8", "flex-backward", "compile"}),
        ),
        # A100 80GB (SXM4 and PCIe share the 312 TFLOP/s dense bf16 peak, NVIDIA's A100 datasheet): Ampere has
        # no FP8 tensor cores, so FP8 rungs are recorded unsupported before anything is built.
        Target(
            "a100",
            "cuda",
            ("A100-SXM4-80GB", "A100 80GB PCIe"),
            312e12,
            None,
            "NVIDIA A100 80GB datasheet, dense (no FP8)",
            80.0,
            frozenset({"flex-backward", "compile"}),
        ),
        # Any other CUDA GPU: no peak (MFU left empty); fp8 is decided from the compute capability.
        Target(
            "cuda",
            "cuda",
            (),
            None,
            None,
            "unknown CUDA GPU: no peak figure",
            None,
            frozenset({"flex-backward", "compile"}),
        ),
        # Atlas 800T A2 (Ascend 910B). Huawei's published dense figure is for the original Ascend 910
        # (256 TFLOP/s FP16, Hot Chips 2019); the 910B variants' figures we found are third-party and
        # disagree (256-376), so no peak is set and MFU stays empty rather than resting on a guess.
        Target(
            "ascend-a2",
            "npu",
            ("910B",),
            None,
            None,
            "Huawei publishes no per-variant 910B dense peak we could verify: MFU not computed",
            None,
            frozenset({"compile"}),
        ),
        # Any Ascend NPU through torch_npu; capabilities are added once measured there.
        Target("npu", "npu", (), None, None, "unknown NPU: no peak figure", None, frozenset()),
    )
}


def get_target(name: str) -> Target:
    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r}; known targets: {', '.join(TARGETS)}")
    return TARGETS[name]


def detect_target() -> Target:
    """The target matching this machine: a named GPU if its device name matches, else the generic one (the
    accelerator backends in the table's order, then the host)."""
    for backend in BACKENDS.values():
        if not backend.accelerator:
            continue
        # Only import an extension (torch_npu) when it is installed: importing it is slow and has side effects.
        if backend.extension is not None:
            if importlib.util.find_spec(backend.extension) is None:
                continue
            importlib.import_module(backend.extension)
        api = backend.torch_api()
        if api is not None and api.is_available():
            return _match_device_name(backend.name, api.get_device_name(0))
    return TARGETS["cpu"]


def _match_device_name(backend: str, device_name: str) -> Target:
    for target in TARGETS.values():
        if target.backend == backend and any(m in device_name for m in target.device_match):
            return target
    return TARGETS[backend]


# Allocator settings per backend for each rung process's environment, as the backend table gives them.
ALLOCATOR_ENV = {name: dict(b.allocator_env) for name, b in BACKENDS.items() if b.allocator_env}


def capabilities(target: Target, nproc: int = 1) -> frozenset[str]:
    """The target's capabilities with the runtime checks resolved on this machine, for rungs of `nproc`
    processes."""
    caps = set(target.capabilities) | ({"multi-process"} if nproc > 1 else set())
    if target.backend == "cuda" and not target.device_match and torch.cuda.is_available():
        # fp8 tensor cores arrived with Ada/Hopper (sm_89 / sm_90).
        if torch.cuda.get_device_capability(0) >= (8, 9):
            caps.add("fp8")
    return frozenset(caps)


class _CpuEvent:
    """A host timestamp with the subset of the torch.cuda.Event API that timing uses."""

    def __init__(self):
        self.t: float | None = None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end: _CpuEvent) -> float:
        return (end.t - self.t) * 1000.0  # milliseconds, like torch.cuda.Event.elapsed_time


def elapsed_s(start, end) -> float:
    """Seconds between two recorded events of one device (waits for `end` to complete)."""
    end.synchronize()
    return start.elapsed_time(end) / 1000.0


class Device:
    """One backend's synchronisation, timing events and memory statistics.

    On cpu the peak memory is the process's peak resident set size (VmHWM), which includes
    the Python interpreter and libraries; the runner gives each rung its own process.
    """

    def __init__(self, backend: str, index: int | None = None):
        self.info = get_backend(backend)  # ValueError for a backend the table does not have
        self.backend = backend
        self.torch_device = torch.device(backend, index) if index is not None else torch.device(backend)
        # torch.npu mirrors the torch.cuda API, so every accelerator shares the code below.
        self._api = self.info.torch_api()

    def __repr__(self):
        return f"Device({self.torch_device})"

    def synchronize(self):
        if self._api is not None:
            self._api.synchronize(self.torch_device)

    def event(self):
        return _CpuEvent() if self._api is None else self._api.Event(enable_timing=True)

    def elapsed_s(self, start, end) -> float:
        return elapsed_s(start, end)

    def reset_peak_memory(self):
        if self._api is not None:
            self._api.reset_peak_memory_stats(self.torch_device)
            return
        try:  # Linux: writing 5 resets the peak RSS (VmHWM) to the current RSS
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass  # elsewhere the peak counts from process start

    def peak_reserved_bytes(self) -> int | None:
        """The allocator's peak reserved memory since the last reset (accelerators): unlike the allocated peak it
        includes a captured CUDA graph's private pool, whose blocks count as free once the capture ends."""
        return self._api.max_memory_reserved(self.torch_device) if self._api is not None else None

    def peak_memory_bytes(self) -> int | None:
        if self._api is not None:
            return self._api.max_memory_allocated(self.torch_device)
        try:
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss if sys.platform == "darwin" else rss * 1024  # macOS reports bytes, Linux KiB

    def empty_cache(self):
        if self._api is not None:
            self._api.empty_cache()

    def device_name(self) -> str:
        if self._api is not None:
            return self._api.get_device_name(self.torch_device)
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return platform.processor() or "cpu"

    def total_memory_gib(self) -> float | None:
        """The accelerator's memory as its driver reports it (a little under the datasheet's figure); None on a host."""
        if self._api is None:
            return None
        return self._api.get_device_properties(self.torch_device).total_memory / 2**30

    def device_count(self) -> int:
        return 1 if self._api is None else self._api.device_count()


def get_device(backend: str, index: int | None = None, target_name: str | None = None) -> Device:
    """The device for a backend; a backend's extension (torch_npu) is imported here, only when it is asked for."""
    info = get_backend(backend)
    if info.extension is not None:
        try:
            importlib.import_module(info.extension)
        except ImportError as e:
            raise SetupError(
                f"target {target_name or backend} needs {info.extension}; install vlabench[{info.extra}]: "
                f"{pip_install(info.extra)}"
            ) from e
    elif backend == "cuda" and not torch.cuda.is_available():
        raise SetupError(
            f"target {target_name or 'cuda'} needs a CUDA GPU and a CUDA build of torch; "
            f"this torch is {torch.__version__}"
        )
    return Device(backend, index)
