"""A profile (`vlabench profile`): one rung's kernel time, launches and data wait. It has no `kind` key and no
`rungs`: `rung` and `steps` tell it apart from a ladder. `vlabench show` does not load it (it is no ResultFile)."""

from __future__ import annotations

from . import ResultKind, register


@register
class Profile(ResultKind):
    name = "profile"
    key = None

    def recognise(self, data: dict) -> bool:
        return data.get("kind") is None and "rung" in data and "steps" in data

    def summary(self, data: dict, name: str, target: str) -> str:
        return f"profile of {name}/{data['rung']} on {target}"
