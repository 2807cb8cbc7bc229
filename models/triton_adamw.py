"""AdamW with the gradient-norm clipping, in two Triton kernels over every parameter tensor at once (Pi0.5's `adamw:
triton-clip`).

Why: torch's fused AdamW (multi_tensor_apply) launches one kernel per chunk of about 110 tensors and 320 blocks,
so Pi0.5's update of 3.2 billion bf16 elements runs as 156 launches that each leave most of the device's memory
bandwidth unused (23 ms per step on an H200, about 2 TB/s of the 4.8 the H200's memory moves), and the total norm
before it runs as per-tensor norms, casts and a stack. Here one launch covers every tensor of a dtype: a table says
which tensor and which 4096 elements each program works on, so the grid is as large as the data and each program
reads its parameter, gradient and two moments with 16-byte loads.

- The norm: each program writes its block's sum of squares to its own slot (no atomics: the sum is the same every
  run), then torch sums the slots; clip_grad_norm_'s coefficient min(max_norm / (norm + 1e-6), 1) stays on the
  device.
- The update: torch's fused AdamW's arithmetic in fp32 (decoupled weight decay, bias corrections from each
  tensor's device step counter), with the gradient multiplied by the coefficient as it is read. The gradients
  themselves are left as backward made them (not clipped in place), since the step drops them after the update.
- The state is torch AdamW's (`step`, `exp_avg`, `exp_avg_sq` per parameter, made at construction), so
  `state_dict` and `init_optimizer_state` (models/graph_capture.py, which a CUDA-graph capture runs first to
  compile the kernels and make the tables) work as for torch's AdamW.

The tables hold each tensor's address as an offset, in elements, from one base tensor passed to the kernel: the
kernel reads 16-byte-aligned tensors through it without per-tensor kernel arguments. Parameters and state keep
their addresses; gradients get new ones whenever backward allocates them (each CUDA-graph capture, for example),
so their column is rewritten on the device with foreach adds of the offsets as scalars (kernel arguments), which a
CUDA-graph capture records like any kernel: no host-to-device copy, no synchronisation. Requirements: CUDA, triton,
contiguous parameters and gradients at 16-byte-aligned addresses. As torch's AdamW, a step skips the parameters
without a gradient; the tables are made for those that have one, again when that set changes (outside a capture).
"""

from __future__ import annotations

import functools
import math

import torch

from .clipped_adamw import ClipsInStep

BLOCK = 4096  # elements per program
ALIGN_BYTES = 16  # the kernels' vector loads


def block_table(numels: list[int], block: int = BLOCK) -> tuple[list[int], list[int], list[int], list[int]]:
    """Which tensor and first element each program takes: (full_tensor, full_start) for the blocks of `block`
    elements that lie wholly inside their tensor, (tail_tensor, tail_start) for each tensor's last, partial block
    (the kernel masks those)."""
    full_tensor, full_start, tail_tensor, tail_start = [], [], [], []
    for i, n in enumerate(numels):
        whole = n // block
        full_tensor += [i] * whole
        full_start += range(0, whole * block, block)
        if n % block:
            tail_tensor.append(i)
            tail_start.append(whole * block)
    return full_tensor, full_start, tail_tensor, tail_start


def offsets_from(base: torch.Tensor, tensors: list[torch.Tensor], what: str) -> list[int]:
    """Each tensor's address as an offset in elements from `base`'s, checked for what the kernels assume."""
    size = base.element_size()
    out = []
    for i, t in enumerate(tensors):
        if t.dtype != base.dtype or not t.is_contiguous() or t.device != base.device:
            raise ValueError(
                f"adamw: triton-clip: {what} {i} (shape {tuple(t.shape)}) must be a contiguous {base.dtype} tensor on "
                f"{base.device}; it is {t.dtype}, {'contiguous' if t.is_contiguous() else 'strided'}, on {t.device}"
            )
        gap = t.data_ptr() - base.data_ptr()
        if gap % ALIGN_BYTES or base.data_ptr() % ALIGN_BYTES:
            raise ValueError(
                f"adamw: triton-clip: {what} {i} (shape {tuple(t.shape)}) is not at a {ALIGN_BYTES}-byte-aligned "
                "address; the kernels read 16 bytes at a time"
            )
        out.append(gap // size)
    return out


@functools.cache
def kernels():
    """The two Triton kernels, defined on first use (triton is imported only where a step runs on CUDA). Each
    program takes BLOCK elements of one tensor: `tensor_of[pid]`, from element `start_of[pid]`; MASKED programs
    cover the tensors' last, partial blocks. `rows[t]` holds tensor t's five offsets: its parameter, gradient,
    exp_avg and exp_avg_sq from `base`, its step counter from `steps`."""
    import triton
    import triton.language as tl

    @triton.jit
    def sum_squares(base, rows, tensor_of, start_of, numels, partials,
                    BLOCK: tl.constexpr, ALIGN: tl.constexpr, MASKED: tl.constexpr):  # fmt: skip
        pid = tl.program_id(0)
        t = tl.load(tensor_of + pid)
        idx = tl.multiple_of(tl.load(start_of + pid), BLOCK) + tl.arange(0, BLOCK)
        g_at = base + tl.multiple_of(tl.load(rows + t * 5 + 1), ALIGN) + idx
        if MASKED:
            g = tl.load(g_at, mask=idx < tl.load(numels + t), other=0.0).to(tl.float32)
        else:
            g = tl.load(g_at).to(tl.float32)
        tl.store(partials + pid, tl.sum(g * g, axis=0))

    @triton.jit
    def adamw(base, steps, rows, tensor_of, start_of, numels, coef_ptr, lr_ptr, lr_value, weight_decay,
              beta1, beta2, log2_beta1, log2_beta2, eps,
              BLOCK: tl.constexpr, ALIGN: tl.constexpr, MASKED: tl.constexpr, LR_ON_DEVICE: tl.constexpr):  # fmt: skip
        pid = tl.program_id(0)
        t = tl.load(tensor_of + pid)
        idx = tl.multiple_of(tl.load(start_of + pid), BLOCK) + tl.arange(0, BLOCK)
        row = rows + t * 5
        p_at = base + tl.multiple_of(tl.load(row), ALIGN) + idx
        g_at = base + tl.multiple_of(tl.load(row + 1), ALIGN) + idx
        m_at = base + tl.multiple_of(tl.load(row + 2), ALIGN) + idx
        v_at = base + tl.multiple_of(tl.load(row + 3), ALIGN) + idx
        if MASKED:
            mask = idx < tl.load(numels + t)
            g = tl.load(g_at, mask=mask, other=0.0).to(tl.float32)
            p = tl.load(p_at, mask=mask, other=0.0).to(tl.float32)
            m = tl.load(m_at, mask=mask, other=0.0).to(tl.float32)
            v = tl.load(v_at, mask=mask, other=0.0).to(tl.float32)
        else:
            g = tl.load(g_at).to(tl.float32)
            p = tl.load(p_at).to(tl.float32)
            m = tl.load(m_at).to(tl.float32)
            v = tl.load(v_at).to(tl.float32)
        if LR_ON_DEVICE:
            lr = tl.load(lr_ptr).to(tl.float32)
        else:
            lr = lr_value
        step = tl.load(steps + tl.load(row + 4))
        g = g * tl.load(coef_ptr)
        # torch's fused AdamW (ADAMW mode): decay, moments, then the bias-corrected step
        p = p - lr * weight_decay * p
        m = beta1 * m + (1.0 - beta1) * g
        v = beta2 * v + (1.0 - beta2) * g * g
        step_size = lr / (1.0 - tl.exp2(step * log2_beta1))
        correction2_sqrt = tl.sqrt(1.0 - tl.exp2(step * log2_beta2))
        p = p - step_size * m / (tl.sqrt(v) / correction2_sqrt + eps)
        out = base.dtype.element_ty
        if MASKED:
            tl.store(p_at, p.to(out), mask=mask)
            tl.store(m_at, m.to(out), mask=mask)
            tl.store(v_at, v.to(out), mask=mask)
        else:
            tl.store(p_at, p.to(out))
            tl.store(m_at, m.to(out))
            tl.store(v_at, v.to(out))

    return sum_squares, adamw


def log2_or_minus_inf(beta: float) -> float:
    """log2(beta), with beta = 0 as -inf: exp2(step * -inf) = 0 = 0 ** step."""
    return math.log2(beta) if beta > 0 else -math.inf


class _Bucket:
    """One param group's tensors of one dtype, and the device tables its kernels read."""

    def __init__(self, group: dict, params: list[torch.Tensor], states: list[dict]):
        self.group, self.params, self.states = group, params, states
        self.base = params[0]  # the tables' offsets are from this tensor's address, in its elements
        self.align = ALIGN_BYTES // self.base.element_size()
        self.steps_base = states[0]["step"]
        device = self.base.device

        def on_device(values, dtype):
            return torch.tensor(values, dtype=dtype).to(device)

        full_tensor, full_start, tail_tensor, tail_start = block_table([p.numel() for p in params], BLOCK)
        # (tensor_of, start_of, programs) for the whole blocks, then for the masked last blocks
        self.parts = (
            (on_device(full_tensor, torch.int32), on_device(full_start, torch.int64), len(full_tensor), False),
            (on_device(tail_tensor, torch.int32), on_device(tail_start, torch.int64), len(tail_tensor), True),
        )
        self.numels = on_device([p.numel() for p in params], torch.int64)
        self.partials = torch.zeros(len(full_tensor) + len(tail_tensor), dtype=torch.float32, device=device)
        steps = [s["step"] for s in states]
        if any(s.dtype != torch.float32 or s.device != device for s in steps):
            raise ValueError(f"adamw: triton-clip: the step counters must be fp32 tensors on {device}")
        columns = (
            offsets_from(self.base, params, "parameter"),
            [0] * len(params),  # the gradients' column: written by point_at_grads
            offsets_from(self.base, [s["exp_avg"] for s in states], "exp_avg"),
            offsets_from(self.base, [s["exp_avg_sq"] for s in states], "exp_avg_sq"),
            [(s.data_ptr() - self.steps_base.data_ptr()) // 4 for s in steps],
        )
        self.rows = on_device([list(row) for row in zip(*columns)], torch.int64)
        self.grad_cells = list(self.rows[:, 1].unbind())  # 0-d views, one per tensor
        self.grads_at: tuple | None = None  # the gradient addresses the grad column holds

    def point_at_grads(self) -> None:
        """The grad column set to the current gradients' offsets, if they moved since the last step."""
        grads = [p.grad for p in self.params]
        addresses = tuple(g.data_ptr() for g in grads)
        if addresses == self.grads_at:
            return
        offsets = offsets_from(self.base, grads, "gradient")
        # the offsets as foreach scalars, i.e. kernel arguments: a capture records them, no host-to-device copy
        torch._foreach_mul_(self.grad_cells, 0)
        torch._foreach_add_(self.grad_cells, offsets)
        self.grads_at = addresses

    def sum_squares(self) -> torch.Tensor:
        """The gradients' sum of squares (fp32 device scalar): per-block partial sums, then their sum."""
        kernel, _ = kernels()
        for tensor_of, start_of, programs, masked in self.parts:
            if programs:
                partials = self.partials[self.parts[0][2] :] if masked else self.partials  # tails after wholes
                kernel[(programs,)](
                    self.base, self.rows, tensor_of, start_of, self.numels, partials,
                    BLOCK=BLOCK, ALIGN=self.align, MASKED=masked,
                )  # fmt: skip
        return self.partials.sum()

    def update(self, coef: torch.Tensor) -> None:
        """AdamW on every tensor of the bucket, each gradient multiplied by `coef` as it is read."""
        _, kernel = kernels()
        group = self.group
        beta1, beta2 = group["betas"]
        lr = group["lr"]
        lr_on_device = isinstance(lr, torch.Tensor)
        for tensor_of, start_of, programs, masked in self.parts:
            if programs:
                kernel[(programs,)](
                    self.base, self.steps_base, self.rows, tensor_of, start_of, self.numels, coef,
                    lr if lr_on_device else coef,  # a pointer argument either way, read only when LR_ON_DEVICE
                    0.0 if lr_on_device else float(lr), float(group["weight_decay"]), float(beta1), float(beta2),
                    log2_or_minus_inf(beta1), log2_or_minus_inf(beta2), float(group["eps"]),
                    BLOCK=BLOCK, ALIGN=self.align, MASKED=masked, LR_ON_DEVICE=lr_on_device,
                )  # fmt: skip


class TritonClippedAdamW(ClipsInStep, torch.optim.AdamW):
    """torch.optim.AdamW (decoupled weight decay) whose `step` also clips the gradients' total 2-norm to `max_norm`,
    as clip_grad_norm_ then AdamW, in Triton kernels over every tensor at once (module docstring). Capturable: a
    step makes no host synchronisation and can be replayed from a CUDA graph."""

    def __init__(self, params, *, max_norm: float, lr: float, betas=(0.9, 0.999), eps=1e-8, **kw):
        super().__init__(params, lr=lr, betas=betas, eps=eps, foreach=False, capturable=True, **kw)
        self.max_norm = float(max_norm)
        self.stepped = False  # whether a step has run (and so the kernels are compiled and the tables made)
        for group in self.param_groups:
            for p in group["params"]:
                if p.device.type != "cuda":
                    raise ValueError(f"adamw: triton-clip needs the parameters on a CUDA device; one is on {p.device}")
                self.state[p] = {
                    "step": torch.zeros((), dtype=torch.float32, device=p.device),
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                }
        self.buckets: list[_Bucket] = []
        self.made_for: tuple | None = None  # which parameters had gradients when the tables were made

    def current_buckets(self) -> list[_Bucket]:
        """The tables for the parameters that have gradients now (torch's AdamW skips the others), made again when
        that set changes, or after load_state_dict replaces the state. The tables are copied to the device, which a
        CUDA-graph capture cannot record, so inside a capture the set must be the one of the step before it."""
        have = tuple(p.grad is not None for group in self.param_groups for p in group["params"])
        if have == self.made_for:
            return self.buckets
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise ValueError(
                "adamw: triton-clip: the parameters with gradients inside this CUDA-graph capture are not those of "
                "the step before it (a warm-up step with the same gradients must come first)"
            )
        self.buckets = []
        for group in self.param_groups:
            by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
            for p in group["params"]:
                if p.grad is not None:
                    by_dtype.setdefault(p.dtype, []).append(p)
            for params in by_dtype.values():
                self.buckets.append(_Bucket(group, params, [self.state[p] for p in params]))
        self.made_for = have
        return self.buckets

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self.made_for = None  # new state tensors: the tables are made again at the next step

    def total_norm(self) -> torch.Tensor:
        """The gradients' total 2-norm (fp32 device scalar), summed in fp32 throughout."""
        buckets = self.current_buckets()
        if not buckets:
            return torch.zeros((), dtype=torch.float32, device=self.param_groups[0]["params"][0].device)
        for b in buckets:
            b.point_at_grads()
        return torch.stack([b.sum_squares() for b in buckets]).sum().sqrt()

    def clip_coefficient(self) -> torch.Tensor:
        """clip_grad_norm_'s coefficient min(max_norm / (total norm + 1e-6), 1), as a device scalar."""
        return torch.clamp(self.max_norm / (self.total_norm() + 1e-6), max=1.0)

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("TritonClippedAdamW.step takes no closure")
        if not self.current_buckets():
            return None  # no gradients at all: nothing to update, as in torch's AdamW
        coef = self.clip_coefficient()
        torch._foreach_add_([s["step"] for b in self.buckets for s in b.states], 1)
        for b in self.buckets:
            b.update(coef)
        self.stepped = True
        return None
