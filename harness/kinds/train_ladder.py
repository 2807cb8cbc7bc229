"""A train-ladder (`vlabench train-ladder`): rungs trained and evaluated against a reference rung; its
`train_ladder` block is required (harness/kinds/_blocks.py TrainLadder). It has a gate of its own."""

from __future__ import annotations

from models.schema import SchemaError

from . import ResultKind, register


@register
class TrainLadder(ResultKind):
    name = "train-ladder"
    key = "train-ladder"
    in_training_tables = True  # compare's training tables (harness/judge/compare_training.py)

    def check(self, data: dict) -> None:
        if data.get("train_ladder") is None:
            raise SchemaError("train_ladder", "the train-ladder block (kind train-ladder)", "nothing")
        super().check(data)

    def table(self, data: dict, fmt: str = "simple", tasks: bool = True) -> str:
        # here: the registry imports this module on its first lookup (docs/extending.md)
        from ..report.train_ladder import train_ladder_table

        return train_ladder_table(data, fmt)

    def gate(self, current: dict, baseline: dict, limits, rungs, current_name: str, baseline_name: str):
        # here: the registry imports this module on its first lookup (docs/extending.md)
        from ..judge.gates import gate_train_ladders

        return gate_train_ladders(current, baseline, limits, rungs, current_name, baseline_name)

    def trained_runs(self, data: dict) -> list[tuple[str, dict]]:
        rungs = (data.get("train_ladder") or {}).get("rungs", [])
        return [
            (r["name"] + (" (sabotaged)" if r["train"].get("test_train_sabotage") else ""), r["train"])
            for r in rungs
            if r.get("train")
        ]
