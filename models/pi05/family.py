"""The Pi0.5 family: what the harness asks of Pi0.5 (models/family.py's protocol), on the model, options and
techniques of this package."""

from __future__ import annotations

import torch

from ..family import Built, DdpFlags, Knobs, ModelFamily, Step, standard_step, training_state_bytes
from ..normalize import Normalizer
from ..optimizers import adamw_unsupported_reason, build_adamw
from ..tokenizers import BUILTIN, StandInTokenizer, builtin_tokenizer, load_sentencepiece
from ..whole_step_graph import WholeStepGraph
from ..workload import Workload
from . import weights
from .batch import make_batches as _make_batches
from .config import SIZES
from .flex import eager_attention_activation_bytes
from .flops import floor_ops, prefix_tail_flops_per_sample, train_flops_per_sample
from .model import Pi05Model, init_weights
from .options import Pi05Options, RecomputePatterns, parse_options
from .processor import Pi05Processor
from .techniques import apply_options

CLIP = 1.0  # openpi clips the gradients' global norm to 1.0


class Pi05Family(ModelFamily):
    name = "pi05"
    sizes = tuple(SIZES)
    options_type = Pi05Options

    def unsupported_reason(self, options: Pi05Options, backend: str, capabilities: frozenset) -> str | None:
        if options.linear == "fp8" and "fp8" not in capabilities:
            return "FP8 matmuls need a GPU with FP8 tensor cores (Hopper/Ada or newer); this target has none"
        if options.attention == "flex" and "flex-backward" not in capabilities:
            return f"FlexAttention has no backward on {backend} in this PyTorch, so it cannot train here"
        if options.cuda_graphs != "none" and backend != "cuda":
            return f"CUDA graphs need a CUDA device; this target's backend is {backend}"
        if reason := adamw_unsupported_reason(options.adamw, backend):
            return reason
        for name in ("fp8_mlp", "fp8_vision_mlp"):
            if options.linear == "fp8" and getattr(options, name) == "triton" and backend != "cuda":
                return f"{name}: triton runs Triton kernels on a CUDA device; this target's backend is {backend}"
        return None

    def parity_tolerance(self, baseline: Pi05Options, options: Pi05Options, dtype: str) -> tuple[float, str]:
        """Largest relative loss difference to the baseline that still counts as the same math."""
        if options.linear == "fp8":
            return 5e-2, (
                "FP8 e4m3 operands keep 3 mantissa bits (~6% per element); per-tensor scaling and "
                "fp32 accumulation average that down to a few percent on the loss"
            )
        if (
            "distributions" in (baseline.time_sampling, options.time_sampling)
            and baseline.time_sampling != options.time_sampling
        ):
            return 5e-2, (
                "the flow time is drawn differently (torch.distributions' gamma-based sampler vs "
                "another draw of the same Beta(1.5, 1)): the losses differ by sampling noise "
                "(0.3-1.2% seen on random weights), so this is a sanity bound, not an exact check"
            )
        if dtype != "fp32" and baseline.precision != options.precision:
            return 5e-2, (
                "the parameters' precision differs (bf16 against openpi's fp32): bf16 parameters round away the "
                "AdamW updates below their 8 mantissa bits that fp32 parameters keep, so the two train apart and "
                "their losses part steadily with the steps (0.7% after 8 steps on an H200, 2.9% after 22 on an "
                "H100, pi05-community-fidelity): a sanity bound, not an exact check"
            )
        changed = {k for k, v in options.as_dict().items() if baseline.as_dict()[k] != v}
        if dtype == "fp32":
            if changed <= {"camera_slots", "recompute", "prefix_tail"}:
                return 1e-5, (
                    "fp32 and identical math: pruning masked slots, recompute and skipping the prefix's unread "
                    "tail change no value the loss reads, only the GEMM shapes and so the order of float sums"
                )
            return 1e-4, (
                "fp32 with other kernels (fused or compiled): reassociated sums differ by ~1e-7 "
                "per op and grow slowly over the optimizer steps"
            )
        return 2e-2, (
            "bf16 keeps 8 mantissa bits (~0.4% per rounding); other kernels round differently and "
            "bf16 weights updated by AdamW drift apart over the warm-up and timed steps"
        )

    def rung_notes(self, previous: dict | None, options: dict, workload: Workload, processes: int = 1) -> list[str]:
        """Analytic remarks on what a rung changes, for tables (e.g. attention memory saved by flex)."""
        notes = []
        prev = parse_options(previous or {})
        opts = parse_options(options)
        if opts.attention == "flex" and prev.attention == "eager":
            cfg = SIZES[workload.model_size]
            slots = workload.cameras if opts.camera_slots == "auto" else opts.camera_slots
            tokens = slots * cfg.vision.tokens + workload.text_tokens + workload.action_horizon
            saved = eager_attention_activation_bytes(
                workload.batch_size,
                cfg.llm.heads,
                tokens,
                tokens,
                2 if workload.dtype == "bf16" else 4,
                cfg.llm.head_dim,
                cfg.llm.kv_heads,
            )
            notes.append(f"eager attention keeps {saved / 2**30:.2f} GiB/layer more for backward (analytic)")
        if prev.prefix_tail and not opts.prefix_tail:
            gflop = prefix_tail_flops_per_sample(SIZES[workload.model_size], workload.cameras, workload.text_tokens)
            notes.append(
                f"skips the last layer's prefix output projection, post-norm and MLP, which the loss never reads: "
                f"{gflop / 1e9:.0f} GFLOP/sample forward, and the backward a compiled layer ran on zero gradients "
                "(analytic)"
            )
        return notes

    def knobs(self, options: dict) -> Knobs:
        opts = parse_options(options)
        return Knobs(
            compile=opts.compile,
            recompute_patterns=opts.recompute.patterns if isinstance(opts.recompute, RecomputePatterns) else (),
            cuda_graphs=opts.cuda_graphs != "none",
            fp8_linears=opts.linear == "fp8",
        )

    def micro_batch_options(self, micro_batches: int) -> dict:
        return {"micro_batches": micro_batches}

    def recompute_groups(self) -> dict[str, tuple[str, ...]]:
        """Module groups for `vlabench recompute-sweep` (LoongForge's cost table: ViT, MLP, attention)."""
        return {
            "vit-layers": ("vision.layers.*",),
            "gemma-mlp": ("backbone.layers.*.prefix.mlp",),
            "attention": ("backbone.layers.*.attention",),
            "expert-mlp": ("backbone.layers.*.suffix.mlp",),
        }

    def build(
        self, size: str, options: Pi05Options, workload: Workload, device, dtype: torch.dtype, seed: int
    ) -> Built:
        with torch.device(device):
            model = Pi05Model(SIZES[size])
        init_weights(model, seed)
        model.to(dtype)
        model.default_horizon = workload.action_horizon
        applied = apply_options(model, options, workload.compile_backend)
        return Built(model.train(), applied)

    def state_bytes(self, size: str, workload: Workload) -> int:
        with torch.device("meta"):
            model = Pi05Model(SIZES[size]).to(torch.bfloat16 if workload.dtype == "bf16" else torch.float32)
        return training_state_bytes(model)

    def prepare_for_ddp(self, built: Built, flags: DdpFlags) -> list[str]:
        """DDP that does not search for unused parameters must not hold any: freeze those the loss never
        reaches (they get no gradient either way, so the math is unchanged)."""
        if flags.find_unused_parameters:
            return []
        dead = set(built.model.parameters_off_the_loss_path())
        for name, p in built.model.named_parameters():
            if name in dead:
                p.requires_grad_(False)
        return sorted(dead)

    def optimizer(
        self, model: torch.nn.Module, options: Pi05Options, workload: Workload, backend: str
    ) -> torch.optim.Optimizer:
        """openpi's AdamW(0.9, 0.95, eps 1e-8, weight decay 1e-10) in the implementation `adamw` names
        (models/optimizers.py), clipping at 1.0; its step counter on the device (`capturable`) when the whole step
        is a CUDA graph."""
        return build_adamw(
            [p for p in model.parameters() if p.requires_grad],
            options.adamw,
            lr=workload.lr,
            betas=(0.9, 0.95),
            eps=1e-8,
            weight_decay=1e-10,
            max_norm=CLIP,
            capturable=options.cuda_graphs == "whole-step",
            compile_backend=workload.compile_backend,
        )

    def make_step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, options: Pi05Options) -> Step:
        """The standard step (loss, backward, clip at 1.0, AdamW), or the same replayed from one CUDA graph."""
        if options.cuda_graphs == "whole-step":
            return WholeStepGraph(self.loss, model, optimizer, clip=CLIP, micro_batches=options.micro_batches)
        return standard_step(self.loss, model, optimizer, clip=CLIP, micro_batches=options.micro_batches)

    def make_batches(self, size: str, workload: Workload, n: int, device, dtype: torch.dtype, seed: int) -> list[dict]:
        return _make_batches(SIZES[size], workload, n, device, dtype, seed)

    def data_processor(self, size: str, workload: Workload, stats: dict, tokenizer: str | None) -> Pi05Processor:
        """LeRobot's Pi0.5 preprocessing: quantile normalisation of state and actions from the dataset's
        statistics (epsilon only where a quantile range is zero), the state padded to the workload's state_pad
        (LeRobot: 32) and discretised into the prompt (unless the workload's robot_state is false), the
        workload's text tokens, PaliGemma's tokenizer (or a stand-in of its vocabulary size; 'bytes': UTF-8
        bytes, and 'pieces': the stand-in's hashed pieces, for a model without PaliGemma's vocabulary, which its
        checkpoint names for the evaluation policy)."""
        cfg = SIZES[size]
        state = Normalizer.from_stats("quantile", stats.get("observation.state", {}), 1e-8, False, "observation.state")
        action = Normalizer.from_stats("quantile", stats.get("action", {}), 1e-8, False, "action")
        if tokenizer in BUILTIN:
            tok = builtin_tokenizer(tokenizer, cfg.vocab)
        else:
            tok = load_sentencepiece(tokenizer) if tokenizer else StandInTokenizer(cfg.vocab)
        return Pi05Processor(
            tok,
            max_tokens=workload.text_tokens,
            state_in_prompt=workload.robot_state,
            state_pad=workload.state_pad,
            state_norm=state,
            action_norm=action,
            image_size=cfg.vision.image_size,
            action_dim=cfg.action_dim,
        )

    def eval_policy(self, checkpoint: str, **kwargs):
        from .policy import Pi05Policy

        return Pi05Policy(checkpoint, **kwargs)

    # -- training to a checkpoint (harness/train): weights under the plain model's names, whatever the options
    def export_weights(self, model: Pi05Model, tensors: dict | None = None) -> dict:
        """`tensors` keyed by the built model's parameter names (default: its weights) under the plain model's."""
        return weights.plain_state_dict(model, tensors)

    def import_weights(self, model: Pi05Model, plain: dict) -> dict:
        """Plain-named tensors under the built model's own names (the inverse of `export_weights`)."""
        return weights.model_state_dict(model, plain)

    def read_weights(self, path: str) -> tuple[dict, str]:
        """Plain-named weights of a checkpoint in the openpi or LeRobot layout, and its size."""
        from .checkpoint import infer_size, read_checkpoint

        state, _ = read_checkpoint(path)
        return state, infer_size({k: tuple(v.shape) for k, v in state.items()}, str(path))

    def save_policy(
        self, folder, plain: dict, size: str, workload: Workload, stats: dict, tokenizer: str | None, extra: dict
    ) -> None:
        """An evaluable checkpoint in LeRobot's layout (models/pi05/export.py) in the existing `folder`."""
        from .export import write_policy

        write_policy(folder, plain, SIZES[size], workload, stats, tokenizer, extra)

    def training_tokenizer(self, size: str) -> str | None:
        """'bytes' for a model without PaliGemma's vocabulary (the evaluation policy tokenises its prompts so),
        None when it needs PaliGemma's SentencePiece tokenizer."""
        from .policy import PALIGEMMA_VOCAB

        return None if SIZES[size].vocab == PALIGEMMA_VOCAB else "bytes"

    def time_conditioning_parameters(self, model: Pi05Model) -> list[str]:
        """The time MLP and every adaRMS modulation: how the model knows the flow time (test sabotage)."""
        return weights.time_conditioning_names(model)

    def floor_ops(self, size: str, workload: Workload) -> tuple[list, list]:
        return floor_ops(
            SIZES[size],
            workload.batch_size,
            workload.cameras,
            workload.text_tokens,
            workload.action_horizon,
        )

    def flops_per_sample(self, size: str, workload: Workload) -> float:
        return train_flops_per_sample(SIZES[size], workload.cameras, workload.text_tokens, workload.action_horizon)


FAMILY = Pi05Family()
