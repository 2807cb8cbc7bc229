"""The GR00T N1.6 family: what the harness asks of GR00T (models/family.py's protocol), on the model, options and
techniques of this package."""

from __future__ import annotations

import torch

from ..family import Built, Knobs, ModelFamily, Step, standard_step, training_state_bytes
from ..optimizers import adamw_unsupported_reason, build_adamw
from ..recompute import RecomputePatterns
from ..schema import SchemaError
from ..weight_copies import copyable, weight_copies
from ..workload import Workload
from .batch import make_batches as _make_batches
from .config import SIZES, Gr00tConfig
from .flops import floor_ops, forward_flops_per_sample, train_flops_per_sample
from .graphs import GraphedStep
from .model import Gr00tModel, apply_mixed_precision, init_weights, set_trainable
from .options import Gr00tOptions, parse_options
from .processor import Gr00tProcessor, make_processor
from .techniques import apply_options, set_tf32, weight_decay_groups

WEIGHT_DECAY = 1e-5  # Isaac-GR00T's TrainingConfig / finetune default; LoongForge's run uses the same
CLIP = 1.0  # the gradients' total norm is clipped to this (transformers' max_grad_norm, Isaac-GR00T's default)


def vl_tokens(size: str, workload: Workload) -> int:
    """The VL sequence length FLOPs are counted at: image tokens plus the workload's `text_tokens`, the budget of
    non-image tokens (chat template, instruction, image markers, padding). LoongForge pads to 220 = 2 x 64 + 92."""
    return workload.cameras * SIZES[size].vision.tokens + workload.text_tokens


def trainable_on_meta(cfg: Gr00tConfig) -> Gr00tModel:
    """The model with N1.6 fine-tuning's trainable set, on the meta device (it allocates nothing): for counting."""
    with torch.device("meta"):
        model = Gr00tModel(cfg)
    set_trainable(model)
    return model


def copied_weights(cfg: Gr00tConfig) -> int:
    """How many weights `bf16_weights: optimizer` keeps a bf16 copy of: those of the trainable plain linears of
    N1.6 fine-tuning's trainable set."""
    model = trainable_on_meta(cfg)
    return sum(m.weight.numel() for m in model.modules() if copyable(m, torch.bfloat16))


class Gr00tFamily(ModelFamily):
    name = "gr00t"
    sizes = tuple(SIZES)
    options_type = Gr00tOptions

    def unsupported_reason(self, options: Gr00tOptions, backend: str, capabilities: frozenset) -> str | None:
        if options.cuda_graphs and backend != "cuda":
            return f"CUDA graphs need a CUDA device; this target is {backend}"
        if options.linear == "fp8" and "fp8" not in capabilities:
            return "FP8 matmuls need a GPU with FP8 tensor cores (Hopper/Ada or newer); this target has none"
        return adamw_unsupported_reason(options.adamw, backend)

    def parity_tolerance(self, baseline: Gr00tOptions, options: Gr00tOptions, dtype: str) -> tuple[float, str]:
        """Largest relative loss difference to the baseline that still counts as the same math. The DiT's
        dropout draws from torch's RNG, which the harness seeds per step, so eager rungs drop the same units."""
        changed = {k for k, v in options.as_dict().items() if baseline.as_dict()[k] != v} - {"ddp"}
        if options.linear == "fp8":
            return 5e-2, (
                "FP8 e4m3 operands keep 3 mantissa bits (~6% per element) in the DiT's GEMMs; per-tensor "
                "scaling and higher-precision accumulation average that down to a few percent on the loss"
            )
        if "compile" in changed:
            return 1e-1, (
                "compiled blocks draw the DiT's dropout masks (p=0.2, 4 per block) from inductor's own "
                "RNG, not eager's: the losses differ by dropout sampling noise (up to 3.7% per step over "
                "30 steps on an H200, full size, batch 16), so this is a sanity bound, not an exact "
                "check; the aot_eager backend keeps eager's masks"
            )
        if dtype == "fp32":
            if changed <= {"lm_head", "recompute"}:
                return 1e-6, (
                    "the same values: the lm_head's logits are dropped, and recompute reruns a module's forward "
                    "from the forward's RNG state (the same dropout masks)"
                )
            if changed <= {"lm_head", "vl_pad"}:
                return 1e-5, (
                    "fp32 and the same math: padding shifts every RoPE position by the same amount "
                    "(relative angles unchanged) and changes GEMM shapes, so only float sums reorder"
                )
            return 1e-4, "fp32 with other kernels (attention, fused AdamW): reassociated sums differ by ~1e-7 per op"
        return 2e-2, (
            "bf16 keeps 8 mantissa bits (~0.4% per rounding); other kernels or shapes round differently "
            "and the bf16 forward drifts over the steps (VL padding to 220 or eager attention: up to "
            "0.9% per step over 30 steps on an H200)"
        )

    def rung_notes(self, previous: dict | None, options: dict, workload: Workload, processes: int = 1) -> list[str]:
        """Analytic remarks on what a rung changes, for tables."""
        notes = []
        prev, opts = parse_options(previous or {}), parse_options(options)
        cfg = SIZES[workload.model_size]
        if prev.lm_head and not opts.lm_head:
            tokens = opts.vl_pad or vl_tokens(workload.model_size, workload)
            gflop = forward_flops_per_sample(cfg, workload.cameras, tokens, workload.action_horizon)["lm_head"]
            logits = workload.batch_size * tokens * cfg.llm.vocab * (2 if workload.dtype == "bf16" else 4)
            notes.append(
                f"skips the discarded lm_head: {gflop / 1e9:.1f} GFLOP/sample and {logits / 2**30:.2f} GiB "
                f"of logits per step (analytic)"
            )
        if opts.vl_pad is not None and opts.vl_pad != prev.vl_pad:
            notes.append(f"VL sequence left-padded to {opts.vl_pad} tokens: fixed shapes, masked padding")
        if opts.grad_sync != prev.grad_sync and opts.grad_sync == "in-graph" and processes > 1:
            notes.append("each gradient bucket's all-reduce captured into the graph, overlapping the rest of backward")
        if opts.bf16_weights != prev.bf16_weights and opts.bf16_weights == "optimizer":
            weights = copied_weights(cfg)
            notes.append(
                f"the trainable linears ({weights / 1e9:.2f} B weights) read bf16 copies that the AdamW update "
                f"writes, {2 * weights / 2**30:.1f} GiB, instead of autocast casting each fp32 weight again every "
                "forward (the same values; analytic)"
            )
        if opts.adamw != prev.adamw:
            notes.append(
                "gradient clipping folded into the AdamW update, compiled as one function: the gradients read twice "
                "a step, never rewritten (the same update up to rounding)"
                if opts.adamw == "compiled"
                else f"AdamW {opts.adamw} (torch's multi-tensor kernels; the same update up to rounding)"
            )
        if opts.graph_optimizer and not prev.graph_optimizer:
            notes.append("gradient clipping and the AdamW step replayed from a second CUDA graph after the first")
        if opts.cuda_graphs and not prev.cuda_graphs:
            notes.append(
                "forward and backward replayed as one CUDA graph per batch shape"
                + (
                    "; the gradient all-reduce runs after the replay, no longer overlapping backward"
                    if processes > 1
                    else ""
                )
            )
        return notes

    def knobs(self, options: dict) -> Knobs:
        opts = parse_options(options)
        return Knobs(
            compile=opts.compile,
            recompute_patterns=opts.recompute.patterns if isinstance(opts.recompute, RecomputePatterns) else (),
            cuda_graphs=opts.cuda_graphs,
            fp8_linears=opts.linear == "fp8",
        )

    def recompute_groups(self) -> dict[str, tuple[str, ...]]:
        """Module groups for `vlabench recompute-sweep`: the SigLIP2 layers (frozen in N1.6 fine-tuning: they
        keep no activations for backward, so recomputing them should save nothing), the LLM layers (only the
        trainable top layers keep activations) and the DiT blocks."""
        return {
            "vit-layers": ("vision.layers.*",),
            "llm-layers": ("llm.layers.*",),
            "dit-blocks": ("dit.blocks.*",),
        }

    def build(
        self, size: str, options: Gr00tOptions, workload: Workload, device, dtype: torch.dtype, seed: int
    ) -> Built:
        """The plain model with N1.6 fine-tuning's trainable set and precision (frozen bf16, trainable fp32 under
        bf16 autocast, TF32 on, for a bf16 workload; all fp32 otherwise), then the rung's switches."""
        with torch.device(device):
            model = Gr00tModel(SIZES[size])
        init_weights(model, seed)
        set_trainable(model)
        apply_mixed_precision(model, dtype)
        if dtype == torch.bfloat16 and torch.device(device).type == "cuda":
            set_tf32(True)
        model.default_horizon = workload.action_horizon
        applied = apply_options(model, options, workload.compile_backend)
        return Built(model.train(), applied)

    def state_bytes(self, size: str, workload: Workload) -> int:
        """N1.6 fine-tuning's trainable set at build's precision; the frozen weights hold no optimizer state."""
        model = trainable_on_meta(SIZES[size])
        apply_mixed_precision(model, torch.bfloat16 if workload.dtype == "bf16" else torch.float32)
        return training_state_bytes(model)

    def optimizer(
        self, model: torch.nn.Module, options: Gr00tOptions, workload: Workload, backend: str
    ) -> torch.optim.Optimizer:
        """Isaac-GR00T's fine-tune optimizer: transformers' `adamw_torch` (torch AdamW), betas (0.9, 0.999), eps
        1e-8, weight decay 1e-5 except on biases and norms, in the implementation `adamw` names
        (models/optimizers.py), clipping at 1.0; its step counter on the device (`capturable`) when
        `graph_optimizer` captures its step. `adamw: compiled` also writes the bf16 weight copies of
        `bf16_weights: optimizer`."""
        return build_adamw(
            weight_decay_groups(model, WEIGHT_DECAY),
            options.adamw,
            lr=workload.lr,
            betas=(0.9, 0.999),
            eps=1e-8,
            max_norm=CLIP,
            capturable=options.graph_optimizer,
            compile_backend=workload.compile_backend,
            copies=weight_copies(model),
        )

    def make_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, options: Gr00tOptions) -> Step:
        """The standard step, or with `cuda_graphs` one that replays a captured forward and backward per batch
        shape (graphs.py); any all-reduce runs after the replay, then clipping at 1.0 and the optimizer step,
        eagerly or (`graph_optimizer`) replayed from a graph of their own."""
        if not options.cuda_graphs:
            return standard_step(self.loss, model, optimizer, CLIP)
        pad_id = getattr(model, "module", model).cfg.pad_token_id
        return GraphedStep(
            self.loss,
            model,
            optimizer,
            options.vl_pad,
            pad_id,
            options.ddp,
            clip=CLIP,
            graph_optimizer=options.graph_optimizer,
            grad_sync=options.grad_sync,
        )

    def make_batches(self, size: str, workload: Workload, n: int, device, dtype: torch.dtype, seed: int) -> list[dict]:
        return _make_batches(SIZES[size], workload, n, device, dtype, seed)

    def data_processor(self, size: str, workload: Workload, stats: dict, tokenizer: str | None) -> Gr00tProcessor:
        """Isaac-GR00T N1.6's LIBERO preprocessing (processor.py): the chat-template prompt with 64 image tokens
        per 224x224 view, min/max normalisation of state and actions from the dataset's statistics (min, max),
        state padded to 128, actions to 128 dimensions with their mask, embodiment libero_panda; Qwen3's
        tokenizer.json, or a stand-in of its vocabulary."""
        if not workload.robot_state:
            raise SchemaError(
                "workload.robot_state", "true: GR00T N1.6 always reads the state (state encoder)", "false"
            )
        return make_processor(SIZES[size], stats, tokenizer)

    def eval_policy(self, checkpoint: str, **kwargs):
        from .policy import Gr00tPolicy

        return Gr00tPolicy(checkpoint, **kwargs)

    def floor_ops(self, size: str, workload: Workload) -> tuple[list, list]:
        """The step's GEMMs and attention calls with the trainable set's backward, the VL sequence at the length
        the FLOPs are counted at, without the discarded lm_head (flops.py's floor_ops)."""
        return floor_ops(
            SIZES[size],
            workload.batch_size,
            workload.cameras,
            vl_tokens(size, workload),
            workload.action_horizon,
        )

    def flops_per_sample(self, size: str, workload: Workload) -> float:
        """The reference step's analytic FLOPs: the discarded lm_head included and the VL sequence at the
        workload's padded length, as LoongForge's published estimate counts them (1.51 TFLOP at 220 tokens), so
        that every rung of a ladder shares one figure (a rung that skips the lm_head does less for the same)."""
        return train_flops_per_sample(
            SIZES[size], workload.cameras, vl_tokens(size, workload), workload.action_horizon, lm_head=True
        )


FAMILY = Gr00tFamily()
