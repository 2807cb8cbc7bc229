"""The GPU's clocks, power, temperature and utilisation sampled through a long run, each sample tagged with the
step the run had reached, so that a stretch of slow steps can be set beside what the device did then (a clock
that dropped, a power cap, another process's load). Read through NVML (torch.cuda's wrappers, which need
nvidia-ml-py); where it cannot be read (no GPU, no NVML) nothing is sampled and the run records None.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .utilisation import summary

COLUMNS = ("elapsed_s", "step", "sm_clock_mhz", "power_w", "temperature_c", "utilisation_percent")


def nvml_readers(device: int | None) -> dict[str, Callable[[], float]] | None:
    """One reader per sampled quantity of `device`, or None where NVML cannot be read."""
    if device is None:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    readers = {
        "sm_clock_mhz": lambda: float(torch.cuda.clock_rate(device)),
        "power_w": lambda: torch.cuda.power_draw(device) / 1000.0,  # NVML reports milliwatts
        "temperature_c": lambda: float(torch.cuda.temperature(device)),
        "utilisation_percent": lambda: float(torch.cuda.utilization(device)),
    }
    try:
        for read in readers.values():
            read()
    except Exception:  # nvidia-ml-py missing, or NVML unusable in this container
        return None
    return readers


class GpuStateSampler:
    """Samples the readers every `interval_s` between `start()` and `stop()`; `step` is the run's step, set by
    the loop as it goes and written beside each sample."""

    def __init__(self, readers: dict[str, Callable[[], float]] | None, interval_s: float = 2.0):
        self.readers = readers
        self.interval_s = interval_s
        self.step = 0
        self.samples: list[list[float]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="vlabench-gpu-state", daemon=True)
        self._began = 0.0

    def start(self) -> GpuStateSampler:
        if self.readers is not None:
            self._began = time.perf_counter()
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.samples.append(self.read())
            except Exception as e:  # NVML gone mid-run: keep what was read, say why it ends
                self.error = f"{type(e).__name__}: {e}"
                return

    def read(self) -> list[float]:
        values = [self.readers[name]() for name in COLUMNS[2:]]
        return [round(time.perf_counter() - self._began, 3), self.step, *values]

    def latest(self, column: str) -> float | None:
        """The last sample's value of `column` (for progress lines), or None before the first sample."""
        return self.samples[-1][COLUMNS.index(column)] if self.samples else None

    def stop(self) -> dict | None:
        """Ends the sampling; the record (every sample, and mean and p90 per quantity), or None if unread."""
        if self.readers is None:
            return None
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        columns = {name: [s[i] for s in self.samples] for i, name in enumerate(COLUMNS)}
        return {
            "interval_s": self.interval_s,
            "source": "NVML through torch.cuda (clock_rate, power_draw, temperature, utilization)",
            "columns": list(COLUMNS),
            "samples": self.samples,
            "summary": {name: summary(columns[name]) for name in COLUMNS[2:]},
            "error": self.error,
        }


__all__ = ["COLUMNS", "GpuStateSampler", "nvml_readers"]
