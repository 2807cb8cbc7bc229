"""The Triton kernels behind models/fp8_casts.py's custom operators (imported only where they run, on CUDA: this
module imports triton). What MODE computes, and why the casts are tiled this way: models/fp8_casts.py.

- `cast_tile`: one program per tile of the [M, N] value(s): computes them and stores each cast to FP8 row-major
  and transposed (Triton stages the transposed store through shared memory, so both stores are coalesced).
- `amax_strip`: one program per GROUP_ROWS rows of a BN-column strip, walking them BM rows a step (a loop, so that
  the loads of one step overlap the math of the last; one tile per program read at about 2 TB/s on the H200),
  keeping the absolute maxima (and for GELU_GRAD the column sums) elementwise in registers. It stores its maxima in
  amax_ptr[program] (amax_ptr[P + program] for GELU_BACKWARD's second value) and its column sums in row `group` of
  sums_ptr [groups, N]: the row a program writes does not depend on the tiling, so none the autotuner benchmarked
  before leaves a stale row behind, and a stale maximum is a maximum of the same values.
"""

from __future__ import annotations

import functools

import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def values(a_ptr, b_ptr, c_ptr, bias_ptr, offsets, rn, mask, N, MODE: tl.constexpr):
    """(v1, v2) computed by MODE from the inputs at `offsets` (row-major element offsets) and the bias at columns
    `rn`; v2 is GELU_BACKWARD's second value (v1 again for the other modes). Inputs by mode: PLAIN a; GELU_MUL gate
    a, up b; GELU_BACKWARD gradient a, gate b, up c; GELU GEMM output a; GELU_GRAD gradient a, GEMM output b."""
    a = tl.load(a_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    if MODE == 0:  # PLAIN
        v1 = a
        v2 = a
    else:
        if MODE == 1 or MODE == 3:  # GELU's input: a (GELU_MUL's gate, GELU's GEMM output) or b
            x = a
        else:
            x = tl.load(b_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        if MODE >= 3:  # the bias, added as torch adds it in bf16
            bias = tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
            x = (x + bias[None, :]).to(tl.bfloat16).to(tl.float32)
        # tanh as torch's CUDA kernels take it (libdevice's tanhf)
        t = libdevice.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))
        if MODE == 1:  # GELU_MUL: times up (b)
            up = tl.load(b_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
            v1 = (0.5 * x * (1.0 + t) * up).to(tl.bfloat16).to(tl.float32)
            v2 = v1
        elif MODE == 3:  # GELU
            v1 = (0.5 * x * (1.0 + t)).to(tl.bfloat16).to(tl.float32)
            v2 = v1
        else:
            d_gelu = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * x * x)
            if MODE == 2:  # GELU_BACKWARD: a = gradient of the product, c = up
                up = tl.load(c_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
                v1 = (a * up * d_gelu).to(tl.bfloat16).to(tl.float32)
                v2 = (a * 0.5 * x * (1.0 + t)).to(tl.bfloat16).to(tl.float32)
            else:  # GELU_GRAD: a = gradient of GELU's output
                v1 = (a * d_gelu).to(tl.bfloat16).to(tl.float32)
                v2 = v1
    return v1, v2


@triton.jit
def cast_tile(a_ptr, b_ptr, c_ptr, bias_ptr, s1_ptr, s2_ptr, q1_ptr, q1t_ptr, q2_ptr, q2t_ptr, M, N,
              MODE: tl.constexpr, E5M2: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):  # fmt: skip
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    rows = rm[:, None].to(tl.int64) * N + rn[None, :]  # element (m, n) in the row-major [M, N] outputs
    cols = rn[None, :].to(tl.int64) * M + rm[:, None]  # and in the transposed [N, M] ones
    top = 57344.0 if E5M2 else 448.0
    v1, v2 = values(a_ptr, b_ptr, c_ptr, bias_ptr, rows, rn, mask, N, MODE)
    if MODE == 2:
        v2 = tl.clamp(v2 * tl.load(s2_ptr), -top, top)
        q2 = v2.to(tl.float8e5) if E5M2 else v2.to(tl.float8e4nv)
        tl.store(q2_ptr + rows, q2, mask=mask)
        tl.store(q2t_ptr + cols, q2, mask=mask)
    v1 = tl.clamp(v1 * tl.load(s1_ptr), -top, top)
    q1 = v1.to(tl.float8e5) if E5M2 else v1.to(tl.float8e4nv)
    tl.store(q1_ptr + rows, q1, mask=mask)
    tl.store(q1t_ptr + cols, q1, mask=mask)


@triton.jit
def amax_strip(a_ptr, b_ptr, c_ptr, bias_ptr, amax_ptr, sums_ptr, M, N, P, MODE: tl.constexpr, ROWS: tl.constexpr,
               BM: tl.constexpr, BN: tl.constexpr):  # fmt: skip
    group = tl.program_id(0)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    m1 = tl.zeros((BM, BN), dtype=tl.float32)
    m2 = tl.zeros((BM, BN), dtype=tl.float32)
    sums = tl.zeros((BM, BN), dtype=tl.float32)
    for step in tl.range(0, ROWS // BM):  # a fixed count: the last group's rows past M are masked
        rm = group * ROWS + step * BM + tl.arange(0, BM)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        v1, v2 = values(a_ptr, b_ptr, c_ptr, bias_ptr, rm[:, None].to(tl.int64) * N + rn[None, :], rn, mask, N, MODE)
        v1 = tl.where(mask, v1, 0.0)  # GELU of a masked element's bias is not 0
        m1 = tl.maximum(m1, tl.abs(v1))
        if MODE == 2:
            m2 = tl.maximum(m2, tl.abs(tl.where(mask, v2, 0.0)))
        if MODE == 4:
            sums += v1
    program = group * tl.num_programs(1) + tl.program_id(1)
    tl.store(amax_ptr + program, tl.max(tl.max(m1, axis=1), axis=0))
    if MODE == 2:
        tl.store(amax_ptr + P + program, tl.max(tl.max(m2, axis=1), axis=0))
    if MODE == 4:
        tl.store(sums_ptr + group.to(tl.int64) * N + rn, tl.sum(sums, axis=0), mask=rn < N)


def _autotuned(kernel, tiles: tuple[tuple[int, int, int], ...]):
    configs = [triton.Config({"BM": bm, "BN": bn}, num_warps=warps) for bm, bn, warps in tiles]
    return triton.autotune(configs, key=["M", "N", "MODE"])(kernel)


@functools.cache
def cast_kernel(tiles: tuple[tuple[int, int, int], ...]):
    """`cast_tile` autotuned over `tiles` (rows, columns, warps) per shape and mode."""
    return _autotuned(cast_tile, tiles)


@functools.cache
def amax_kernel(tiles: tuple[tuple[int, int, int], ...]):
    """`amax_strip` autotuned over `tiles` (rows a step, columns, warps) per shape and mode."""
    return _autotuned(amax_strip, tiles)
