"""What a measuring process builds: the spec the runner writes for a rung process (harness/ladder/rung.py), the kernel
floor's process (harness/ladder/floor.py) and a training run (harness/train/setup.py), and the one recipe that makes it
from a scenario, a target and the command line's overrides.

A spec crosses a process boundary as JSON (`to_dict`, `from_dict`); its `workload` there is the result file's
`workload` block (the fields, the model family and its FLOPs per sample).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from models import get_family

from .errors import InputError
from .ladder.memory_plan import check_unlisted_target
from .machine.hardware import Target
from .scenario import Rung, Scenario, Workload
from .stats.batch_sizes import BatchSizes


@dataclass(frozen=True)
class RungSpec:
    model: str  # the model family
    backend: str
    workload: Workload
    options: dict = dataclasses.field(default_factory=dict)  # the rung's cumulative options, as written
    loader: dict = dataclasses.field(default_factory=dict)  # the rung's cumulative `loader:` options
    peak_flops: float | None = None  # the target's bf16 peak, for MFU
    floor_fp8: bool = False  # the kernel floor's process only: time its GEMMs in FP8 too (the device has FP8)
    rung: str | None = None  # a training run: the rung it trains
    grad_accum: int = 1  # a training run: micro-batches per optimizer step (workload.batch_size each)

    def batches(self, nproc: int = 1) -> BatchSizes:
        """The micro-batch (the workload's batch_size), a process's step and the global batch of `nproc` processes."""
        return BatchSizes.of(self.workload.batch_size, self.grad_accum, nproc)

    def workload_record(self) -> dict:
        """The `workload` block of a result file."""
        flops = get_family(self.model).flops_per_sample(self.workload.model_size, self.workload)
        return self.workload.record(self.model, flops)

    def for_rung(self, rung: Rung) -> RungSpec:
        return dataclasses.replace(self, options=rung.cumulative, loader=rung.loader_cumulative)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "workload": self.workload_record()}

    @classmethod
    def from_dict(cls, data: dict) -> RungSpec:
        return cls(**{**data, "workload": Workload.from_record(data["workload"])})


def scenario_spec(
    scenario: Scenario,
    target: Target,
    rung: Rung | None = None,
    batch_size: int | None = None,
    model_size: str | None = None,
    grad_accum: int = 1,
) -> RungSpec:
    """The spec of `rung` (none: the workload alone, for the floor) on `target`: the target's workload with the
    command line's batch size (per optimizer step) and model size, split into `grad_accum` micro-batches. A
    value the command line got wrong is one line naming its flag."""
    workload = scenario.workload_for(target.name)
    overrides = {"batch_size": batch_size, "model_size": model_size}
    workload = dataclasses.replace(workload, **{k: v for k, v in overrides.items() if v is not None})
    if workload.batch_size % grad_accum:
        raise InputError("--grad-accum", None, f"a divisor of the batch size {workload.batch_size}", str(grad_accum))
    sizes = get_family(scenario.model).sizes
    if workload.model_size not in sizes:
        raise InputError("--model-size", None, "one of " + ", ".join(sizes), repr(workload.model_size))
    check_unlisted_target(scenario, target, workload)
    # from here on the workload's batch_size is the micro-batch, what one forward sees (RungSpec.batches)
    workload = dataclasses.replace(workload, batch_size=workload.batch_size // grad_accum)
    spec = RungSpec(scenario.model, target.backend, workload, peak_flops=target.peak_bf16_flops, grad_accum=grad_accum)
    return spec if rung is None else spec.for_rung(rung)
