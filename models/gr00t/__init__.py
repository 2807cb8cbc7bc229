"""GR00T N1.6 (Isaac-GR00T's Gr00tN1d6) written in plain PyTorch, and its optimization switches. The family the
harness drives is `FAMILY` (family.py); the names below are what other modules import from the package."""

from .config import FULL, SIZES, TINY, Gr00tConfig
from .family import CLIP, FAMILY, Gr00tFamily, vl_tokens
from .flops import forward_flops_per_sample, train_flops_per_sample
from .graphs import GraphedStep
from .model import Gr00tModel, apply_mixed_precision, init_weights, set_trainable
from .options import Gr00tOptions, parse_options
from .processor import Gr00tProcessor
from .techniques import apply_options, count_parameters

__all__ = [
    "CLIP",
    "FAMILY",
    "FULL",
    "SIZES",
    "TINY",
    "Gr00tConfig",
    "Gr00tFamily",
    "Gr00tModel",
    "Gr00tOptions",
    "Gr00tProcessor",
    "GraphedStep",
    "apply_mixed_precision",
    "apply_options",
    "count_parameters",
    "forward_flops_per_sample",
    "init_weights",
    "parse_options",
    "set_trainable",
    "train_flops_per_sample",
    "vl_tokens",
]
