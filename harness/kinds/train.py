"""A training run (`vlabench train`): its `train` block (harness/kinds/_blocks.py TrainRecord)."""

from __future__ import annotations

from . import ResultKind, register


@register
class Train(ResultKind):
    name = "train"
    key = "train"

    def table(self, data: dict, fmt: str = "simple", tasks: bool = True) -> str:
        # here: the registry imports this module on its first lookup (docs/extending.md)
        from ..train.report import train_table

        return train_table(data, fmt)

    def trained_runs(self, data: dict) -> list[tuple[str, dict]]:
        return [(data["train"].get("rung", "run"), data["train"])]
