"""Model families vlabench can measure. Each is plain PyTorch and never imports the harness."""

from __future__ import annotations

import importlib

from .family import ModelFamily
from .schema import SchemaError

# Registration is the one place the harness learns of a family: name -> module holding `FAMILY`.
FAMILIES = {"pi05": "models.pi05", "gr00t": "models.gr00t"}


class UnknownFamilyError(LookupError):
    """A model family name not in the registry: one line naming the known families (the CLI prints it as is)."""

    def __init__(self, name):
        self.name = name
        super().__init__(f"unknown model family {name!r}; known families: {', '.join(FAMILIES)}")


def get_family(name: str) -> ModelFamily:
    if name not in FAMILIES:
        raise UnknownFamilyError(name)
    return importlib.import_module(FAMILIES[name]).FAMILY


__all__ = ["FAMILIES", "ModelFamily", "SchemaError", "UnknownFamilyError", "get_family"]
