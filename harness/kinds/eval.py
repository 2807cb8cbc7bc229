"""An evaluation (`vlabench eval`): episodes of a policy in simulation and the success rates counted from them."""

from __future__ import annotations

from . import ResultKind, register


@register
class Eval(ResultKind):
    name = "eval"
    key = "eval"

    def table(self, data: dict, fmt: str = "simple", tasks: bool = True) -> str:
        # here: the registry imports this module on its first lookup (docs/extending.md)
        from ..report.report import eval_table

        return eval_table(data, fmt, tasks)

    def count(self, data: dict) -> str:
        episodes = data.get("episodes")
        return f" with {len(episodes)} episodes" if isinstance(episodes, list) else super().count(data)
