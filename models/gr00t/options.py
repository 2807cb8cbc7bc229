"""GR00T N1.6 optimization switches. A ladder rung is a cumulative set of these options, read with the one typed
loader (models/schema.py); the defaults are the reference's training path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from ..family import DdpFlags
from ..fp8 import Fp8Recipe, LinearKind
from ..recompute import RecomputePatterns
from ..schema import Bounds, SchemaError, parse, to_plain
from ..siglip import Fc1Bias
from .attention import AttentionKind

# none: eager; per-block: every SigLIP2 layer, LLM layer and DiT block its own compile unit.
Compile = Literal["none", "per-block"]
# The AdamW implementations of models/optimizers.py (AdamWKind) that GR00T offers. Not fused-clip nor triton-clip:
# both were made and measured for Pi0.5's bf16 gradients (clip_grad_norm_'s multiply has no foreach fast path for
# them), while GR00T's trainable weights and gradients are fp32, and neither has run under GR00T's per-shape graphs
# (`graph_optimizer`), whose gradient tensors change with the shape.
Gr00tAdamW = Literal["foreach", "fused", "compiled"]


@dataclass(frozen=True)
class Gr00tOptions:
    # Compute the lm_head logits that the reference computes on every token and drops (true), or skip them.
    lm_head: bool = True
    # Left-pad the VL token sequence to this fixed length (LoongForge pads to 220 for its CUDA graphs), or
    # null: pad to the batch's longest prompt, as the reference collator does.
    vl_pad: Annotated[int, Bounds(1)] | None = None
    # sdpa: the plain-PyTorch stand-in for the reference's flash-attention-2; eager: materialised scores.
    attention: AttentionKind = "sdpa"
    compile: Compile = "none"
    # Activation recompute (gradient checkpointing): "none" (the reference's training path keeps every
    # activation) or {patterns: [glob, ...]}: every module whose dotted name matches is checkpointed, its
    # activations dropped after forward and recomputed in backward from the forward's RNG state (the DiT's
    # dropout draws the same masks), e.g. `llm.layers.*`, `dit.blocks.*`
    recompute: Literal["none"] | RecomputePatterns = "none"
    # fp8: torchao float8 training for the DiT blocks' large linears (a GPU with FP8 tensor cores)
    linear: LinearKind = "bf16"
    fp8_recipe: Fp8Recipe = "tensorwise"
    # One CUDA graph per micro-batch shape holding forward and backward (LoongForge's per-micro-batch graphs);
    # the optimizer step, clipping and the gradient all-reduce stay outside. Needs vl_pad (fixed shapes).
    cuda_graphs: bool = False
    # How the reference's AdamW runs (models/optimizers.py says what each implementation does), among GR00T's
    adamw: Gr00tAdamW = "foreach"
    # Where the gradient all-reduce of several processes runs with cuda_graphs: after-graph (LoongForge's
    # default: after each replay, exposed) or in-graph (each bucket's all-reduce captured into the graph where
    # backward produced it, overlapping the rest of backward; needs ddp implementation: buckets)
    grad_sync: Literal["after-graph", "in-graph"] = "after-graph"
    # Gradient clipping and the AdamW step replayed from a second CUDA graph after the forward/backward graph
    # (and the all-reduce), with the optimizer's step counter on the device (capturable). Needs cuda_graphs
    # and a constant learning rate (a schedule is refused at the first changed step).
    graph_optimizer: bool = False
    # reference: the host synchronisations of the reference's step, made where it makes them and on the same
    # values (its boolean-index image scatter, twice; SigLIP2's window packing and unpacking, gathers indexed by
    # host lists; transformers' check whether the causal mask can be skipped; the flow-matching Beta draw on the
    # host, copied to the device), so that an eager baseline waits on the host as the reference's does. none
    # (default): none of them (the losses are the same either way). A CUDA graph cannot hold them.
    host_syncs: Literal["none", "reference"] = "none"
    # reference: SigLIP2's input path as the reference runs it (models/gr00t/window_packing.py): patchify and
    # position-grid resize image by image, the patches packed into 14x14 windows and back with host-made indexes,
    # the unused 2D-RoPE table sliced per window, the per-image lengths recomputed in every layer. The values are
    # the same; an eager baseline pays the reference's host work (and its two syncs). none (default): one batched
    # path. A CUDA graph cannot hold its host-made indexes.
    vision_packing: Literal["none", "reference"] = "none"
    # Where SigLIP2's fc1 adds its bias: in the GEMM (nn.Linear, as the reference), or in the GELU's kernel after a
    # GEMM without bias (models/siglip.py VisionMLP says why: aten's addmm copies the broadcast bias into the whole
    # output first at fc1's shape)
    vision_fc1_bias: Fc1Bias = "gemm"
    # Where the bf16 weights the trainable linears multiply with come from: autocast (the reference: each fp32
    # weight cast to bf16 again in every forward), or optimizer: a bf16 copy beside each fp32 weight, written by
    # the compiled AdamW's update and read by the forward (models/weight_copies.py; the same values, the gradient
    # still reaches the fp32 weight in fp32). Needs adamw: compiled and a bf16 workload.
    bf16_weights: Literal["autocast", "optimizer"] = "autocast"
    # DistributedDataParallel flags, or None for no DDP wrapper (the harness applies it: it owns processes).
    ddp: DdpFlags | None = None

    def __post_init__(self):
        if self.bf16_weights == "optimizer" and self.adamw != "compiled":
            raise SchemaError(
                "bf16_weights", "adamw: compiled as well (its update writes the copies)", f"adamw {self.adamw}"
            )
        if self.graph_optimizer and not self.cuda_graphs:
            raise SchemaError(
                "graph_optimizer", "cuda_graphs: true as well (it replays after that graph)", "cuda_graphs false"
            )
        if self.grad_sync == "in-graph" and not self.cuda_graphs:
            raise SchemaError(
                "grad_sync", "cuda_graphs: true as well (it places the all-reduce in that graph)", "cuda_graphs false"
            )
        if self.grad_sync == "in-graph" and self.ddp is not None and self.ddp.implementation != "buckets":
            raise SchemaError(
                "grad_sync", "ddp implementation: buckets (their hooks are captured)", self.ddp.implementation
            )
        if self.cuda_graphs and self.vision_packing != "none":
            raise SchemaError(
                "vision_packing",
                "none with cuda_graphs (a graph cannot capture its host-made indexes)",
                self.vision_packing,
            )
        if self.cuda_graphs and self.host_syncs != "none":
            raise SchemaError(
                "host_syncs", "none with cuda_graphs (a graph cannot capture a host synchronisation)", self.host_syncs
            )
        if self.cuda_graphs and self.vl_pad is None:
            raise SchemaError(
                "cuda_graphs", "vl_pad set as well (a graph needs a fixed VL length, e.g. 220)", "vl_pad null"
            )

    def as_dict(self) -> dict:
        return to_plain(self)


def parse_options(options: dict) -> Gr00tOptions:
    """A rung's cumulative options as Gr00tOptions; raises SchemaError naming the option."""
    return parse(Gr00tOptions, options)
