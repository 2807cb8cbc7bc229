"""The operations a training step cannot do without, for the kernel floor (`vlabench floor`): every GEMM of
forward and backward with its exact shape, and the attention calls. A family lists its forward GEMMs and
attention calls; this module derives backward (for a weight GEMM Y[M,N] = X[M,K] W[N,K]^T: the input gradient
[M,K] = dY[M,N] W[N,K] when the input needs one, and the weight gradient [N,K] = dY^T[N,M] X[M,K] when the weight
trains) and no recompute is counted: the floor is what the hardware must do, not what a rung chooses to redo.
An attention call's backward costs twice its forward (scores and weighted sum again, then the gradients of q, k
and v): `Attention.flops`, as the families' analytic counts take it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gemm:
    name: str
    m: int  # rows of the output (tokens)
    n: int  # columns of the output (features out)
    k: int  # the reduced dimension (features in)
    count: int = 1  # how many such GEMMs a step runs
    weight_grad: bool = True  # the weight trains
    input_grad: bool = True  # the input carries a gradient (false for the first layer on raw inputs)
    fp8: bool = True  # the family's FP8 rung may convert this layer (then only if its shape qualifies)

    def flops(self) -> float:
        """FLOPs of the forward GEMMs (2 per multiply-add)."""
        return 2.0 * self.m * self.n * self.k * self.count

    def training_flops(self) -> float:
        """Forward, and the gradients of input and weight where they are computed."""
        return self.flops() * (1 + self.input_grad + self.weight_grad)


@dataclass(frozen=True)
class Attention:
    name: str
    batch: int
    heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    count: int = 1
    backward: bool = True
    # the mask: "none" (bidirectional), "causal" (each query sees the keys up to its own position; q_len ==
    # kv_len), or "prefix-suffix" (Pi0.5's: a bidirectional prefix block, then an action block that sees the
    # prefix and itself), with the number of prefix tokens
    mask: str = "none"
    prefix: int = 0

    def pairs(self) -> int:
        """Query-key pairs the mask allows (what a kernel that skips masked blocks must compute)."""
        if self.mask == "causal":
            return self.q_len * (self.q_len + 1) // 2
        if self.mask == "prefix-suffix":
            return self.prefix * self.prefix + (self.q_len - self.prefix) * self.kv_len
        return self.q_len * self.kv_len

    def flops(self) -> float:
        """FLOPs of a training step's calls: scores and weighted sum over the allowed pairs, forward, and
        twice that in backward where it runs."""
        forward = 2.0 * 2 * self.batch * self.heads * self.head_dim * self.pairs() * self.count
        return forward * (3 if self.backward else 1)


def floor_flops(forward: list[Gemm], attention: list[Attention]) -> float:
    """FLOPs of a training step's GEMMs and attention calls as the floor counts them."""
    return sum(g.training_flops() for g in forward) + sum(a.flops() for a in attention)


def training_gemms(forward: list[Gemm]) -> list[tuple[Gemm, str, int, int, int]]:
    """(layer, pass, M, N, K) of every GEMM of forward and backward, as plain [M,K] x [K,N] products."""
    out = []
    for g in forward:
        out.append((g, "fwd", g.m, g.n, g.k))
        if g.input_grad:
            out.append((g, "dX", g.m, g.k, g.n))
        if g.weight_grad:
            out.append((g, "dW", g.n, g.k, g.m))
    return out
