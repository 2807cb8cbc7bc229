"""The install line of an optional extra of vlabench (sim, fp8, npu, data, dev), for messages that name one.

The line pins the torch already installed: without the pin, pip resolves an extra's dependencies against the
newest torch (LIBERO's pull in torchvision, which requires it) and replaces a CPU torch by a CUDA build."""

from __future__ import annotations


class SetupError(RuntimeError):
    """This machine lacks what the chosen target or option needs (a GPU, an optional package): the user's to fix,
    so the CLI prints it in one line with the usage exit status (2), not as an internal failure."""


def pip_install(extra: str) -> str:
    """`pip install torch==<installed> -e '.[<extra>]'`, as the README writes it (run from the repository root)."""
    import torch

    return f"pip install torch=={torch.__version__.split('+')[0]} -e '.[{extra}]'"
