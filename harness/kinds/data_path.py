"""A data-path profile (`vlabench profile --data-only`): one rung's input pipeline timed alone, no model
(harness/ladder/profile.py data_path_rate). Like a profile it has no `kind` key and one `rung`; `batches` and
`batch_s` tell it apart. Its schema is its own (DataPathFile): only `vlabench show` loads it, printing what
`vlabench profile --data-only` printed (data_rate_table)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Annotated, Any

from models.schema import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, Bounds, Expect, SchemaError

from . import ResultKind, register

Seconds = Annotated[float, POSITIVE]


@dataclass(frozen=True)
class DataLoader:
    __open_schema__ = True
    kind: str
    workers: Annotated[int, NON_NEGATIVE]
    preprocess: str


@dataclass(frozen=True)
class DataPathFile:
    """What `vlabench profile --data-only --out` writes (harness/commands/profile.py data_only)."""

    __open_schema__ = True
    scenario: str
    rung: str
    target: str
    batch_size: Annotated[int, AT_LEAST_ONE]
    batches: Annotated[int, Bounds(2, None)]
    warmup_batches: Annotated[int, NON_NEGATIVE]
    batch_s: Annotated[tuple[Seconds, ...], Expect("a list of batch times in seconds")]
    samples_per_s: Seconds
    median_batch_ms: Seconds
    p10_p90_batch_ms: Annotated[tuple[Seconds, ...], Bounds(2, 2), Expect("[p10, p90] in ms")]
    loader: DataLoader
    provenance: dict[str, Any] | None = None


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


@register
class DataPath(ResultKind):
    name = "data-path"
    key = None
    schema = DataPathFile

    def recognise(self, data: dict) -> bool:
        return data.get("kind") is None and "rung" in data and "batches" in data and "batch_s" in data

    def check(self, data: dict) -> None:
        """The figures data_path_rate derives from the batch times: their count, the samples/s and the median."""
        times = data["batch_s"]
        if len(times) != data["batches"]:
            raise SchemaError("batch_s", f"one time per batch ({data['batches']})", f"{len(times)} times")
        rate = data["batch_size"] * len(times) / sum(times)
        if not _close(data["samples_per_s"], rate):
            raise SchemaError(
                "samples_per_s", f"batch_size x batches / sum(batch_s) ({rate:.6g})", str(data["samples_per_s"])
            )
        median = 1000 * statistics.median(times)
        if not _close(data["median_batch_ms"], median):
            raise SchemaError(
                "median_batch_ms", f"the median of batch_s in ms ({median:.6g})", str(data["median_batch_ms"])
            )

    def table(self, data: dict, fmt: str = "simple", tasks: bool = True) -> str:
        # here: the registry imports this module on its first lookup (docs/extending.md)
        from ..ladder.profile import data_rate_table

        return data_rate_table(
            f"{data['scenario']}/{data['rung']} on {data['target']}, batch {data['batch_size']}", data
        )

    def count(self, data: dict) -> str:
        return ""

    def summary(self, data: dict, name: str, target: str) -> str:
        return f"data-path profile of {name}/{data['rung']} on {target}"
