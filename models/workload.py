"""The workload a model family builds, feeds and counts for: batch and input shapes, precision, learning rate,
model size, seed, step counts and the compile backend.

The harness's scenario workload (harness/scenario.py) is this dataclass with where the batches come from added,
so a family receives the harness's workload typed as this one and reads its fields by name. A result file's
`workload` block is `as_dict()` with the model family and its analytic FLOPs per sample beside the fields.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Literal

from .schema import POSITIVE, Bounds, parse, to_plain

Dtype = Literal["bf16", "fp32"]
CompileBackend = Literal["inductor", "aot_eager", "eager"]

# Upper bounds far above any real run (openpi trains at batch 32 with 200 text tokens and 50 actions; a ladder
# times tens of steps) and low enough that a slip such as `batch_size: 10**12` is one line before anything
# allocates, not a MemoryError inside a rung. The command line's overrides are held to the same bounds
# (harness/arguments.py workload_flag).
BATCH_SIZE = Bounds(1, 65536)
STEPS = Bounds(0, 100_000)
TIMED_STEPS = Bounds(1, 100_000)
CAMERAS = Bounds(1, 16)
TOKENS = Bounds(0, 8192)
ACTION_HORIZON = Bounds(1, 1024)
STATE_PAD = Bounds(1, 1024)
SEED = Bounds(0, 2**32 - 1)  # derived seeds (seed x 1,000,003 + step) stay within torch's 64-bit seeds


@dataclass(frozen=True)
class Workload:
    # what one forward of one process sees (the micro-batch); a step of several micro-batches (gradient
    # accumulation) or processes trains a multiple of it
    batch_size: Annotated[int, BATCH_SIZE]
    cameras: Annotated[int, CAMERAS] = 2
    text_tokens: Annotated[int, TOKENS] = 200
    action_horizon: Annotated[int, ACTION_HORIZON] = 50
    warmup_steps: Annotated[int, STEPS] = 5
    timed_steps: Annotated[int, TIMED_STEPS] = 20
    seed: Annotated[int, SEED] = 0
    dtype: Dtype = "bf16"
    lr: Annotated[float, POSITIVE] = 2.5e-5
    model_size: str = "full"  # one of the family's sizes (the harness checks it against the family)
    # the robot's state is a model input (Pi0.5: discretised into the prompt). openpi's pi05_libero trains
    # without it (discrete_state_input False); a family that always reads the state refuses false
    robot_state: bool = True
    # Pi0.5: the state is padded with zeros to this many values before it is discretised into the prompt
    # (LeRobot's max_state_dim, 32; LIBERO's state has 8 values, and a model trained from scratch needs no room
    # for other robots' states: each padded zero costs prompt tokens)
    state_pad: Annotated[int, STATE_PAD] = 32
    # The torch.compile backend for compile rungs. The CPU smoke uses aot_eager: it checks graph capture
    # and parity, while inductor's C++ build takes about a minute per graph on 2 cores.
    compile_backend: CompileBackend = "inductor"

    def as_dict(self) -> dict:
        return to_plain(self)

    def record(self, model: str, flops_per_sample: float) -> dict:
        """The `workload` block of a result file: the fields, then the model family and its FLOPs per sample."""
        return {**self.as_dict(), "model": model, "flops_per_sample": flops_per_sample}

    @classmethod
    def record_keys(cls) -> tuple[str, ...]:
        """The keys of `record`'s block, in its order."""
        return (*(f.name for f in dataclasses.fields(cls)), "model", "flops_per_sample")

    @classmethod
    def from_record(cls, block: dict):
        """The workload of a result file's `workload` block (or of `as_dict()`): the keys `record` adds and
        fields an older file lacks (their defaults) are fine."""
        names = {f.name for f in dataclasses.fields(cls)}
        return parse(cls, {k: v for k, v in block.items() if k in names}, "workload")


__all__ = ["CompileBackend", "Dtype", "Workload"]
