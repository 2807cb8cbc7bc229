"""A run's batch sizes, each named for what it counts, made in one place.

The workload's `batch_size` (and a result's `workload.batch_size`) is the micro-batch: what one forward of one process
sees. A training step of `grad_accum` micro-batches updates once per process (`vlabench train --grad-accum`;
harness/spec.py splits the command line's batch into them), and a ladder rung of `nproc` processes (torchrun) steps
them all at once: samples/s counts the global batch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchSizes:
    micro: int  # one forward of one process: the workload's batch_size
    per_step: int  # one process's optimizer step: grad_accum micro-batches
    global_: int  # one optimizer step of every process: what a step's samples/s counts

    @classmethod
    def of(cls, micro: int, grad_accum: int = 1, nproc: int = 1) -> BatchSizes:
        return cls(micro, micro * grad_accum, micro * grad_accum * nproc)

    @classmethod
    def of_result(cls, result: dict) -> BatchSizes:
        """A result file's: `workload.batch_size`, a training's `train.grad_accum` and the processes per rung."""
        grad_accum = (result.get("train") or {}).get("grad_accum", 1)
        return cls.of(result["workload"]["batch_size"], grad_accum, result.get("nproc") or 1)
