"""Activation recompute by module-name pattern (in the spirit of LoongForge's
`--activation-checkpoint-module-patterns`): every module whose dotted name matches a pattern is
wrapped so that its activations are dropped after forward and recomputed in backward.

Patterns match segment by segment: `*` stands for exactly one name segment, so `vision.layers.*`
matches `vision.layers.0` but not `vision.layers.0.mlp`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Annotated

from torch import nn
from torch.utils.checkpoint import checkpoint

from .schema import Bounds, Expect


@dataclass(frozen=True)
class RecomputePatterns:
    """Recompute every module whose dotted name matches one of these globs (`*` = one name segment): the
    option value `{patterns: [...]}` of a family's `recompute` option."""

    patterns: Annotated[tuple[str, ...], Bounds(1), Expect("a non-empty list of module-name glob patterns")]


class Recompute(nn.Module):
    """Runs the wrapped module under non-reentrant checkpointing (nesting is allowed). `preserve_rng_state`
    restores the RNG state of the forward before recomputing it: needed when the module draws random numbers
    (dropout), so that the recompute draws the forward's masks and the gradients stay exact."""

    def __init__(self, module: nn.Module, preserve_rng_state: bool = False):
        super().__init__()
        self.module = module
        self.preserve_rng_state = preserve_rng_state

    def forward(self, *args, **kwargs):
        if not self.training:
            return self.module(*args, **kwargs)
        return checkpoint(self.module, *args, use_reentrant=False, preserve_rng_state=self.preserve_rng_state, **kwargs)


def name_matches(name: str, pattern: str) -> bool:
    parts, pats = name.split("."), pattern.split(".")
    return len(parts) == len(pats) and all(fnmatchcase(a, p) for a, p in zip(parts, pats))


def matching_modules(model: nn.Module, patterns) -> list[str]:
    return [name for name, _ in model.named_modules() if name and any(name_matches(name, p) for p in patterns)]


def apply_recompute(model: nn.Module, patterns, preserve_rng_state: bool = False) -> list[str]:
    """Wrap every module matching one of `patterns`; returns the wrapped names. A pattern that matches
    nothing is an error, so a typo cannot silently turn recompute off. Without `preserve_rng_state` nothing
    recomputed may draw random numbers (openpi checkpoints that way)."""
    patterns = list(patterns)
    for p in patterns:
        if not matching_modules(model, [p]):
            raise ValueError(f"recompute pattern {p!r} matches no module")
    names = matching_modules(model, patterns)
    # Resolve parents first, then wrap deepest first so outer wraps hold the already-wrapped inner ones.
    targets = []
    for name in names:
        parent_name, _, attr = name.rpartition(".")
        targets.append((name.count("."), model.get_submodule(parent_name) if parent_name else model, attr))
    for _, parent, attr in sorted(targets, key=lambda t: -t[0]):
        setattr(parent, attr, Recompute(getattr(parent, attr), preserve_rng_state))
    return names


def unwrapped_name(model: nn.Module, name: str) -> str:
    """A parameter or module name of `model` as it reads without the Recompute wrappers around it (each adds a
    `.module` segment), e.g. `dit.blocks.0.module.ff.proj.weight` -> `dit.blocks.0.ff.proj.weight`."""
    parts, plain, prefix = name.split("."), [], ""
    for part in parts:
        path = f"{prefix}.{part}" if prefix else part
        if not (part == "module" and isinstance(model.get_submodule(prefix), Recompute)):
            plain.append(part)
        prefix = path
    return ".".join(plain)
