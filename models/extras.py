"""The install line of an optional extra of vlabench (sim, fp8, npu, data, ray, dev), for messages that name one, and
which extra brings a module that an import found missing.

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


# The importable modules each extra brings (pyproject.toml's optional dependencies), for the one line a missing one
# gets instead of a traceback
EXTRA_OF_MODULE = {
    "av": "data",
    "pyarrow": "data",
    "cv2": "data",
    "torchao": "fp8",
    "torch_npu": "npu",
    "ray": "ray",
    **dict.fromkeys(
        ("mujoco", "robosuite", "bddl", "libero", "safetensors", "sentencepiece", "huggingface_hub"), "sim"
    ),
}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """One line naming the extra that brings the module `exc` found missing; None for a module no extra brings (a
    bug or a broken install, not a choice the user made)."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    return f"{top} is not installed: it comes with the {extra} extra: {pip_install(extra)}"
