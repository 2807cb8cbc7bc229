"""AdamW with the gradient-norm clipping folded into its update: compiled as one function (ClippedAdamW, the `adamw:
compiled` option), or as torch's fused kernel's gradient scale (FusedClippedAdamW, Pi0.5's `adamw: fused-clip`).

`clip_grad_norm_` then torch's fused AdamW move each fp32 gradient four times per step: the norm reads it, the
clip rewrites it (read and write), the update reads it. Here the clip scale multiplies each gradient inside the
update instead, so a gradient is read twice (the norm, the update) and never written; inductor fuses the foreach
ops below into a few horizontally fused kernels. The arithmetic is torch AdamW's (its capturable foreach branch:
decoupled weight decay, bias corrections from step counters on the device) and clip_grad_norm_'s, so the update is
the same up to rounding.

Everything stays on the device (step counters, learning rate, clip scale), so the step has no host sync and can be
replayed from a CUDA graph. With `copies`, the update also writes each listed weight's bf16 copy
(models/weight_copies.py: the forward reads it instead of casting the fp32 weight again). The state is torch
AdamW's (`step`, `exp_avg`, `exp_avg_sq`), made at construction; the learning rate of each group is a device
tensor, written in place by a schedule (harness/train/recipe.py). The function compiles on the first step, or in
`warm_up`, which a CUDA-graph capture calls first: a compile cannot run inside a capture.
"""

from __future__ import annotations

import torch

# one group's tensors as the compiled update takes them:
# (params, grads, exp_avgs, exp_avg_sqs, steps, lr, weight_decay, beta1, beta2, eps, copies), where `copies` is
# empty or holds one low-precision copy per parameter, in the same order
GroupTensors = tuple


def clipped_adamw_update(groups: list[GroupTensors], max_norm: float) -> None:
    """Clip every group's gradients together to a total 2-norm of `max_norm` (clip_grad_norm_'s coefficient),
    then one AdamW step per group with the clipped gradients, in place on the parameters and their state, and
    each parameter's copy (if its group has copies) written from the updated parameter. A group's copies list
    matches its parameters one to one, so inductor fuses the copy into the update's kernels."""
    grads_all = [g for group in groups for g in group[1]]
    total = torch.nn.utils.get_total_norm(grads_all, 2.0, foreach=True)
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for params, grads, exp_avgs, exp_avg_sqs, steps, lr, weight_decay, beta1, beta2, eps, copies in groups:
        grads = torch._foreach_mul(grads, scale)  # a new list: the gradients themselves are not rewritten
        torch._foreach_add_(steps, 1)
        if weight_decay != 0:
            torch._foreach_mul_(params, 1 - lr * weight_decay)
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
        # step size lr / (1 - beta1^t), and sqrt(1 - beta2^t), from the counters on the device
        correction1 = torch._foreach_pow(beta1, steps)
        torch._foreach_neg_(correction1)
        torch._foreach_add_(correction1, 1)
        step_sizes = torch._foreach_div(correction1, lr)  # (1 - beta1^t) / lr: the update divides by it
        correction2 = torch._foreach_pow(beta2, steps)
        torch._foreach_neg_(correction2)
        torch._foreach_add_(correction2, 1)
        torch._foreach_sqrt_(correction2)
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denom, correction2)
        torch._foreach_add_(denom, eps)
        torch._foreach_mul_(denom, step_sizes)
        torch._foreach_addcdiv_(params, exp_avgs, denom, value=-1.0)
        if copies:
            torch._foreach_copy_(copies, params)


class ClipsInStep:
    """An optimizer whose `step` clips the gradients' total norm to `max_norm` itself: the caller does not call
    clip_grad_norm_ (models/family.py clip_and_step)."""

    max_norm: float


class FusedClippedAdamW(ClipsInStep, torch.optim.AdamW):
    """torch's fused AdamW whose `step` also clips the gradients' total norm to `max_norm`: clip_grad_norm_'s
    coefficient goes into the fused kernel as its gradient scale (the input torch's GradScaler sets as
    `optimizer.grad_scale`), which the kernel divides each gradient by inside the update and writes back, so the
    gradients end clipped as after clip_grad_norm_.

    Why: clip_grad_norm_ multiplies every gradient by an fp32 device scalar, and torch's foreach multiply has no
    fast path when the list's dtype differs from the scalar's: for Pi0.5's 3.2 billion bf16 gradients it runs
    tensor by tensor in 15 ms on an H200 (scripts/optimizer_step_gaps.py), a third of the optimizer's time. The
    update is the same up to rounding: the clipped gradient is not rounded to bf16 before the update reads it."""

    def __init__(self, params, *, max_norm: float, lr: float, betas=(0.9, 0.999), eps=1e-8, **kw):
        super().__init__(params, lr=lr, betas=betas, eps=eps, fused=True, **kw)
        self.max_norm = float(max_norm)

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("FusedClippedAdamW.step takes no closure")
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        total = torch.nn.utils.get_total_norm(grads, 2.0, foreach=True)
        # 1 / clip_grad_norm_'s coefficient min(max_norm / (total + 1e-6), 1): the kernel divides by it
        self.grad_scale = torch.clamp((total + 1e-6) / self.max_norm, min=1.0)
        try:
            return super().step()
        finally:
            self.grad_scale = None


class ClippedAdamW(ClipsInStep, torch.optim.AdamW):
    """torch.optim.AdamW whose `step` also clips the gradients' total norm to `max_norm` (the caller does not
    call clip_grad_norm_: models/family.py clip_and_step), compiled with `backend` on the first step. `copies`:
    (weight, copy) pairs whose copy the step writes from the updated weight (models/weight_copies.py)."""

    def __init__(
        self,
        params,
        *,
        max_norm: float,
        backend: str,
        lr: float,
        betas=(0.9, 0.999),
        eps=1e-8,
        copies: list[tuple[torch.Tensor, torch.Tensor]] = (),
        **kw,
    ):
        super().__init__(params, lr=lr, betas=betas, eps=eps, foreach=True, capturable=True, **kw)
        self.max_norm = float(max_norm)
        trained = {p for group in self.param_groups for p in group["params"]}
        stray = [tuple(w.shape) for w, _ in copies if w not in trained]
        if stray:
            raise ValueError(f"ClippedAdamW: {len(stray)} copied weights are not in its groups (e.g. shape {stray[0]})")
        self.copies = dict(copies)  # weight -> its copy
        for group in self.param_groups:
            device = group["params"][0].device
            group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
            for p in group["params"]:
                self.state[p] = {
                    "step": torch.zeros((), dtype=torch.float32, device=p.device),
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                }
        # made here, compiled on the first call (nothing compiles before a step)
        self._update = torch.compile(clipped_adamw_update, backend=backend)
        self.stepped = False  # whether the update has run (and so is compiled)

    def _groups(self) -> list[GroupTensors]:
        """Each param group's tensors, split in two: the parameters with a copy (and their copies) and those
        without."""
        out = []
        for group in self.param_groups:
            stepped = [p for p in group["params"] if p.grad is not None]
            beta1, beta2 = group["betas"]
            copied = [p for p in stepped if p in self.copies]
            for params, copies in (
                (copied, [self.copies[p] for p in copied]),
                ([p for p in stepped if p not in self.copies], []),
            ):
                if not params:
                    continue
                state = [self.state[p] for p in params]
                out.append(
                    (
                        params,
                        [p.grad for p in params],
                        [s["exp_avg"] for s in state],
                        [s["exp_avg_sq"] for s in state],
                        [s["step"] for s in state],
                        group["lr"],
                        group["weight_decay"],
                        beta1,
                        beta2,
                        group["eps"],
                        copies,
                    )
                )
        return out

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("ClippedAdamW.step takes no closure")
        self._update(self._groups(), self.max_norm)
        self.stepped = True

    @torch.no_grad()
    def warm_up(self) -> None:
        """Compile the update outside any CUDA-graph capture: one step on the current gradients at a learning rate
        of zero (the parameters do not move: the decay factor is 1 and every step size 0), then the state reset
        to the zeros it starts from, so the next step is the first. Nothing once the update has run: it is
        compiled, and the state is training's."""
        if self.stepped:
            return
        rates = [group["lr"].clone() for group in self.param_groups]
        for group in self.param_groups:
            group["lr"].zero_()
        self.step()
        for group, rate in zip(self.param_groups, rates):
            group["lr"].copy_(rate)
        for state in self.state.values():
            for value in state.values():
                value.zero_()

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's, then each group's learning rate put back into a device tensor (a saved one may come back on the
        host, or as a float)."""
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            device = group["params"][0].device
            group["lr"] = torch.as_tensor(group["lr"], dtype=torch.float32).to(device).clone()
