"""Activation recompute by module-name pattern (in the spirit of LoongForge's
`--activation-checkpoint-module-patterns`): every module whose dotted name matches a pattern is
wrapped so that its activations are dropped after forward and recomputed in backward.

Patterns match segment by segment: `*` stands for exactly one name segment, so `vision.layers.*`
matches `vision.layers.0` but not `vision.layers.0.mlp`.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from torch import nn
from torch.utils.checkpoint import checkpoint


class Recompute(nn.Module):
    """Runs the wrapped module under non-reentrant checkpointing (nesting is allowed)."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        if not self.training:
            return self.module(*args, **kwargs)
        # no RNG state saved and restored around the recompute: nothing recomputed here draws random numbers
        # (openpi passes False too)
        return checkpoint(self.module, *args, use_reentrant=False, preserve_rng_state=False, **kwargs)


def name_matches(name: str, pattern: str) -> bool:
    parts, pats = name.split("."), pattern.split(".")
    return len(parts) == len(pats) and all(fnmatchcase(a, p) for a, p in zip(parts, pats))


def matching_modules(model: nn.Module, patterns) -> list[str]:
    return [name for name, _ in model.named_modules() if name and any(name_matches(name, p) for p in patterns)]


def apply_recompute(model: nn.Module, patterns) -> list[str]:
    """Wrap every module matching one of `patterns`; returns the wrapped names. A pattern that matches
    nothing is an error, so a typo cannot silently turn recompute off."""
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
        setattr(parent, attr, Recompute(getattr(parent, attr)))
    return names
