"""A ladder (`vlabench run`): rungs measured one after another; the file has no `kind` key (or `kind: ladder`)."""

from __future__ import annotations

from . import ResultKind, register


@register
class Ladder(ResultKind):
    name = "ladder"
    key = None
    in_compare_columns = True  # compare's per-hardware columns (harness/judge/compare.py), gate-power, floor shares

    def recognise(self, data: dict) -> bool:
        # a profile has no kind either: it holds one rung's `rung` (harness/kinds/profile.py, data_path.py)
        return data.get("kind") in (None, "ladder") and "rung" not in data

    def table(self, data: dict, fmt: str = "simple", tasks: bool = True) -> str:
        # here: the registry imports this module on its first lookup (docs/extending.md)
        from ..report.report import ladder_table

        return ladder_table(data, fmt)
