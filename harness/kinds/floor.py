"""A kernel floor (`vlabench floor`): what the step's GEMMs and attention cost at best on this card."""

from __future__ import annotations

from . import ResultKind, register


@register
class Floor(ResultKind):
    name = "floor"
    key = "floor"
    provides_floor = True  # a ladder shown beside it shows each rung's share (harness/ladder/floor.py attach_floors)

    def table(self, data: dict, fmt: str = "simple", tasks: bool = True) -> str:
        # here: the registry imports this module on its first lookup (docs/extending.md)
        from ..report.report import floor_table

        return floor_table(data, fmt)

    def count(self, data: dict) -> str:
        return ""
