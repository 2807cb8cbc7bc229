"""Model families vlabench can measure. Each is plain PyTorch and never imports the harness."""

from __future__ import annotations

import importlib
import os

from .family import ModelFamily
from .schema import SchemaError

# Registration is the one place the harness learns of a family: name -> module holding `FAMILY`.
BUILT_IN = {"pi05": "models.pi05", "gr00t": "models.gr00t"}
# Families outside this package: `name=module` entries, comma-separated, read when `models` is imported. Being in
# the environment, the registration reaches the rung processes the runner starts (they import `models` afresh).
FAMILIES_ENV = "VLABENCH_FAMILIES"


def families_from_env(text: str | None) -> dict[str, str]:
    """The `name=module` entries of VLABENCH_FAMILIES (empty or unset: none); a malformed entry is a ValueError."""
    out = {}
    for entry in (text or "").split(","):
        if not entry.strip():
            continue
        name, sep, module = (part.strip() for part in entry.partition("="))
        if not sep or not name or not module:
            raise ValueError(f"{FAMILIES_ENV}: expected name=module entries separated by commas, got {entry!r}")
        out[name] = module
    return out


FAMILIES = {**BUILT_IN, **families_from_env(os.environ.get(FAMILIES_ENV))}


class UnknownFamilyError(LookupError):
    """A model family name not in the registry: one line naming the known families (the CLI prints it as is)."""

    def __init__(self, name):
        self.name = name
        super().__init__(f"unknown model family {name!r}; known families: {', '.join(FAMILIES)}")


def get_family(name: str) -> ModelFamily:
    if name not in FAMILIES:
        raise UnknownFamilyError(name)
    return importlib.import_module(FAMILIES[name]).FAMILY


__all__ = [
    "BUILT_IN",
    "FAMILIES",
    "FAMILIES_ENV",
    "ModelFamily",
    "SchemaError",
    "UnknownFamilyError",
    "families_from_env",
    "get_family",
]
