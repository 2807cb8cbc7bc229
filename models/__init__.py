"""Model families vlabench can measure. Each is plain PyTorch and never imports the harness."""

from __future__ import annotations

import importlib

from .family import ModelFamily
from .schema import SchemaError

# Registration is the one place the harness learns of a family: name -> module holding `FAMILY`.
FAMILIES = {"pi05": "models.pi05", "gr00t": "models.gr00t"}


def get_family(name: str) -> ModelFamily:
    if name not in FAMILIES:
        raise KeyError(name)
    return importlib.import_module(FAMILIES[name]).FAMILY


__all__ = ["FAMILIES", "ModelFamily", "SchemaError", "get_family"]
