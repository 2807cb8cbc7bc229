"""How fast the machine itself was while a rung ran: a fixed probe kernel on the rung's device, timed before,
between and after the timed steps.

A rung's own step times cannot tell a slower rung from a slower machine when other work (another job on
the CPUs, a throttled VM, another tenant on the GPU) lasts the whole run. The probe can: it is the same
work in every run, so if the probe ran N% slower in one run than in the other, the machine was N% slower.
The gate uses it to call such a comparison inconclusive instead of a regression.

The kernel is a square matmul in the device's working precision, repeated a number of times calibrated
once per rung so that one probe takes about the backend's `probe_s` (harness/machine/backends.py, with its size and dtype): long enough to span several scheduler time slices (a
short probe could fit between a competing process's slices and miss it), short against a step. Runs are
compared in matmuls per second, so a different repeat count does not matter. The probe runs in the rung's own
process between its steps, so on a CPU it uses the rung's intra-op threads (torch.get_num_threads(), recorded as
`threads`): a busy core that the rung's threads wait for at every op slows the probe's threaded matmul too.

On an accelerator the host is probed too: a step that launches thousands of small kernels (an eager,
launch-bound step) runs at the speed of the host thread that dispatches them, which the device's matmul does
not see. The host probe times HOST_OPS tiny in-place CPU tensor ops (the per-op dispatch path every launch
goes through) with the host clock at the same points; it is recorded, not gated.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .backends import get_backend

HOST_OPS = 1000  # about 1-3 ms of dispatch on a server CPU


@dataclass
class MachineProbe:
    device: object  # harness.machine.hardware.Device
    size: int = 0
    repeats: int = 1
    times_s: list[float] = field(default_factory=list)
    where: list[str] = field(default_factory=list)  # "before", "step N", "after"
    host_times_s: list[float] = field(default_factory=list)  # accelerators only: the host dispatch probe

    def __post_init__(self):
        backend = get_backend(self.device.backend)
        self.size = backend.probe_size
        dtype = backend.torch_probe_dtype
        gen = torch.Generator().manual_seed(0)
        self._a = torch.randn(self.size, self.size, generator=gen).to(self.device.torch_device, dtype)
        self._b = torch.randn(self.size, self.size, generator=gen).to(self.device.torch_device, dtype)
        self._run(1)  # first call: allocation, library set-up
        once = self._time(1)
        self.repeats = max(1, round(backend.probe_s / max(once, 1e-6)))
        self._host = torch.zeros(1) if backend.accelerator else None

    def _run(self, repeats: int) -> None:
        for _ in range(repeats):
            torch.mm(self._a, self._b)

    def _time(self, repeats: int) -> float:
        self.device.synchronize()
        start, end = self.device.event(), self.device.event()
        start.record()
        self._run(repeats)
        end.record()
        return self.device.elapsed_s(start, end)

    def sample(self, where: str) -> float:
        """Time one probe (device-synchronised) and keep it."""
        seconds = self._time(self.repeats)
        self.times_s.append(seconds)
        self.where.append(where)
        if self._host is not None:
            self.host_times_s.append(self._time_host())
        return seconds

    def _time_host(self) -> float:
        return time_host_ops(self._host)

    def record(self) -> dict:
        dtype = get_backend(self.device.backend).probe_dtype
        return {
            "kernel": f"{dtype} matmul {self.size}x{self.size}x{self.size}",
            "repeats": self.repeats,
            # the probe runs in the rung's process, on the rung's intra-op threads: it measures the machine as the
            # rung uses it (a probe on fewer threads than the rung would miss a busy core the rung waits for)
            "threads": torch.get_num_threads(),
            "times_s": list(self.times_s),
            "where": list(self.where),
            **(
                {"host_kernel": f"{HOST_OPS} in-place CPU tensor adds", "host_times_s": list(self.host_times_s)}
                if self.host_times_s
                else {}
            ),
        }


def time_host_ops(x: torch.Tensor) -> float:
    """Seconds for HOST_OPS in-place adds to a one-element CPU tensor: the host's dispatch speed, which a busy or
    throttled host slows down whatever the device does."""
    start = time.perf_counter()
    for _ in range(HOST_OPS):
        x.add_(1.0)
    return time.perf_counter() - start


def probe_rates(record: dict | None) -> list[float] | None:
    """Matmuls per second of each probe in a rung's probe record (None when the rung has none)."""
    if not record or not record.get("times_s"):
        return None
    return [record.get("repeats", 1) / t for t in record["times_s"]]


def whole_probe_rate(record: dict) -> float:
    """Matmuls per second over all of a rung's probes: their count over their total time."""
    return record.get("repeats", 1) * len(record["times_s"]) / sum(record["times_s"])


def same_kernel(a: dict | None, b: dict | None) -> bool:
    """Whether two probe records measured the same work: the same kernel on the same number of threads (where
    both say; records before the thread count was kept compare by kernel alone)."""
    if not (a and b and a.get("kernel") == b.get("kernel")):
        return False
    return a.get("threads") is None or b.get("threads") is None or a["threads"] == b["threads"]


__all__ = ["MachineProbe", "probe_rates", "same_kernel", "whole_probe_rate"]
