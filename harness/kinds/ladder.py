"""A ladder (`vlabench run`): rungs measured one after another; the file has no `kind` key (or `kind: ladder`)."""

from __future__ import annotations

from . import ResultKind, register
from ._ab_schema import AB_SCHEMA


@register
class Ladder(ResultKind):
    name = "ladder"
    key = None
    in_compare_columns = True  # compare's per-hardware columns (harness/judge/compare.py), gate-power, floor shares

    def recognise(self, data: dict) -> bool:
        # a profile has no kind either: it holds one rung's `rung` (harness/kinds/profile.py, data_path.py); an A/B's
        # ab.json neither: its `schema` is its own (harness/kinds/ab.py)
        return data.get("kind") in (None, "ladder") and "rung" not in data and data.get("schema") != AB_SCHEMA

    def table(self, data: dict, fmt: str = "simple", tasks: bool = True) -> str:
        # here: the registry imports this module on its first lookup (docs/extending.md)
        from ..report.report import ladder_table

        return ladder_table(data, fmt)
