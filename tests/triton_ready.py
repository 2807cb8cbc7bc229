"""Whether Triton kernels can run in a test: a CUDA device and triton installed (the GPU tests skip otherwise)."""

import pytest
import torch


def _has_triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


needs_gpu = pytest.mark.skipif(
    not (torch.cuda.is_available() and _has_triton()), reason="the kernels need a CUDA device and triton"
)
