"""Pi0.5 (openpi / LeRobot architecture) written in plain PyTorch, and its optimization switches. The family the
harness drives is `FAMILY` (family.py); the names below are what other modules import from the package."""

from .config import FULL, SIZES, SMALL, TINY, Pi05Config
from .family import CLIP, FAMILY, Pi05Family
from .flops import forward_flops_per_sample
from .model import Pi05Model, init_weights
from .options import Pi05Options, parse_options
from .techniques import apply_options, count_parameters

__all__ = [
    "CLIP",
    "FAMILY",
    "FULL",
    "SIZES",
    "SMALL",
    "TINY",
    "Pi05Config",
    "Pi05Family",
    "Pi05Model",
    "Pi05Options",
    "apply_options",
    "count_parameters",
    "forward_flops_per_sample",
    "init_weights",
    "parse_options",
]
