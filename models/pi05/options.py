"""Pi0.5 optimization switches. A ladder rung is a cumulative set of these options, read with the one typed
loader (models/schema.py): each enumeration below is defined once and the error messages come from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from ..compile_units import CompileTuning
from ..family import DdpFlags
from ..fp8 import Fp8Recipe, LinearKind
from ..optimizers import AdamWKind
from ..recompute import RecomputePatterns
from ..schema import Bounds, parse, to_plain
from ..siglip import Fc1Bias
from .attention import AttentionKind

Compile = Literal["none", "backbone", "per-layer"]
# Where the flow time comes from: "harness" (drawn with the batch from the seed), or drawn inside the step:
# "distributions" (torch.distributions.Beta, LeRobot's generic path) or "fast" (u ** (1/1.5)).
TimeSampling = Literal["harness", "distributions", "fast"]
RecomputePreset = Literal["none", "nested-full"]
# openpi: bf16 weights except ~120M kept in fp32 (SigLIP's patch and position embeddings, every RMSNorm with its
# adaRMS Dense, action in/out and the time MLP), with the streams cast at those boundaries; bf16: every weight
Precision = Literal["openpi", "bf16"]


@dataclass(frozen=True)
class Pi05Options:
    # Image slots the model runs: an int (fixed slots, absent cameras become masked placeholders, the
    # community path) or "auto" (one slot per camera the batch declares).
    camera_slots: Annotated[int, Bounds(1, 8)] | Literal["auto"] = 3
    attention: AttentionKind = "eager"
    vision_attention: Literal["sdpa", "eager"] = "sdpa"  # SigLIP's kernel: SDPA in both references
    precision: Precision = "openpi"  # for a bf16 workload; fp32 workloads are fp32 throughout
    # "none", "nested-full" (openpi's nested checkpointing) or {patterns: [glob, ...]}
    recompute: RecomputePreset | RecomputePatterns = "nested-full"
    compile: Compile = "none"
    # SigLIP's layers compiled too, each its own unit (one graph reused by every layer and camera); the image
    # loop, the post-norm and the projector stay eager. Its linears then train in FP8 with `linear: fp8`.
    compile_vision: bool = False
    # SigLIP runs once over every camera of the batch (the cameras stacked on the batch dimension: larger GEMMs,
    # half the launches with two cameras) instead of once per camera as openpi and LeRobot run it; the same values
    batch_cameras: bool = False
    # How inductor picks the kernels of every compile unit (the inductor backend only; models/compile_units.py):
    # its heuristics; its pointwise and reduction kernels' block sizes refined by coordinate descent; or each GEMM
    # benchmarked among cuBLAS and its Triton templates, with the pointwise work after it fused into the template's
    # epilogue where that is faster (max_autotune_gemm). The last two benchmark candidates while compiling
    compile_tuning: CompileTuning = "default"
    # Where SigLIP's fc1 adds its bias: in the GEMM (nn.Linear, as openpi and LeRobot), or in the GELU's kernel after
    # a GEMM without bias (models/siglip.py VisionMLP says why); plain bf16/fp32 linears only (FP8 ones add their own)
    vision_fc1_bias: Fc1Bias = "gemm"
    linear: LinearKind = "bf16"
    fp8_recipe: Fp8Recipe = "tensorwise"
    # The Gemma MLPs' FP8 with `linear: fp8`: torchao's Float8Linear per linear, or the whole gated MLP as one
    # function whose casts (both layouts the GEMMs read) are tiled Triton kernels (models/fp8_mlp.py; tensorwise
    # scaling as torchao's, CUDA only)
    fp8_mlp: Literal["torchao", "triton"] = "torchao"
    # SigLIP's MLPs (fc1, GELU, fc2, with biases) likewise, with `linear: fp8` and `compile_vision` (SigLIP trains in
    # FP8 only when compiled): torchao's linears, or one function with Triton casts (models/fp8_mlp.py)
    fp8_vision_mlp: Literal["torchao", "triton"] = "torchao"
    time_sampling: TimeSampling = "harness"
    # Compute the last joint layer's prefix output (its output projection, post-norm and MLP) and the prefix's
    # final norm, as both references do in training and the action loss never reads (true), or skip them.
    prefix_tail: bool = True
    fused_qkv: bool = False
    fused_gate_up: bool = False
    # How openpi's AdamW runs (models/optimizers.py says what each implementation does): every one of them
    adamw: AdamWKind = "foreach"
    # whole-step: forward, backward, clipping and the optimizer step replayed from one CUDA graph
    # (models/whole_step_graph.py); one process, a CUDA device
    cuda_graphs: Literal["none", "whole-step"] = "none"
    # The step's batch run as this many equal slices, forward and backward one after another with the gradients
    # summed, then one clip and update: the same mean loss and update with one slice's activations alive at a time
    # (the memory plan's choice besides recompute on a card with less memory; harness/ladder/memory_plan.py)
    micro_batches: Annotated[int, Bounds(1, 64)] = 1
    # DistributedDataParallel flags, or None for no DDP wrapper (the harness applies it: it owns processes).
    ddp: DdpFlags | None = None

    def as_dict(self) -> dict:
        return to_plain(self)


def parse_options(options: dict) -> Pi05Options:
    """A rung's cumulative options as Pi05Options; raises SchemaError naming the option."""
    return parse(Pi05Options, options)
