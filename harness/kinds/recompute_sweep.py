"""A recompute sweep (`vlabench recompute-sweep`): the memory and time cost of recomputing each part."""

from __future__ import annotations

from . import ResultKind, register


@register
class RecomputeSweep(ResultKind):
    name = "recompute-sweep"
    key = "recompute-sweep"

    def table(self, data: dict, fmt: str = "simple", tasks: bool = True) -> str:
        # here: the registry imports this module on its first lookup (docs/extending.md)
        from ..ladder.sweep import sweep_table

        return sweep_table(data, fmt)
