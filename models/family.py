"""The interface through which the harness drives a model family, with the defaults a family may keep.

`models/` never imports `harness/`: the harness asks a family (a `ModelFamily` subclass registered in
models/__init__.py) to parse a rung's options, say whether a target can train them, build the model, make
batches, take a training step, count FLOPs and judge loss parity, and measures the rest itself. A family
needs nothing else from the harness, and the harness calls nothing else on a family.

Option names and values are the family's own: where the harness needs to know what a rung's options do (does
it replay CUDA graphs, train linears in FP8, recompute by pattern) or needs to write options (the recompute
sweep's configurations), it asks the family (`knobs`, `recompute_options`, `compile_options`) and never looks
an option up by name.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Protocol, get_args, get_type_hints

import torch
from torch import nn

from .clipped_adamw import ClipsInStep
from .ddp import CommHook, DdpFlags
from .schema import SchemaError, parse, to_plain
from .workload import Dtype, Workload

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


@dataclass(frozen=True)
class Applied:
    """What a rung's switches did to the built model, by module name: kept in the rung record and read by
    the harness (several compile units change how DDP must be set up)."""

    fp8_linears: tuple[str, ...] = ()
    recomputed: tuple[str, ...] = ()
    compile_units: tuple[str, ...] = ()
    fp32_modules: tuple[str, ...] = ()  # kept in fp32 in a bf16 model (mixed precision as the reference)
    weight_copies: tuple[str, ...] = ()  # linears reading a low-precision weight copy the optimizer writes

    def as_dict(self) -> dict:
        return to_plain(self)


@dataclass(frozen=True)
class Knobs:
    """What a rung's options set, in the terms the harness reports and sweeps on (read by the family from its
    own options; a family without one of these knobs keeps the default)."""

    compile: str | None = None  # the compile mode, one of the family's compile_modes(); None: no compile knob
    # the module-name patterns the options recompute by pattern; empty: nothing, or a preset that is not a
    # pattern list (e.g. Pi0.5's nested-full)
    recompute_patterns: tuple[str, ...] = ()
    cuda_graphs: bool = False  # the step replays CUDA graphs (their memory pool is reserved, not allocated)
    fp8_linears: bool = False  # linears train in FP8 (the kernel floor to compare with is the FP8 one)


@dataclass
class Built:
    model: nn.Module
    applied: Applied


Step = Callable[[dict], torch.Tensor]


class DataProcessor(Protocol):
    """A family's input processing for training on a dataset, split where the reference training path does
    the work: `collate` in the loader's worker processes (picklable; models.processing.ProcessorSteps makes it
    from `raw_frames` and `collate_fields`), `prepare` on the host in the training process (its random draws
    from `generator`), `finish` on the device inside the step. Optional: `row_fields(raw) -> dict`, what `prepare`
    derives from each row alone (Pi0.5's prompt tokens), which `prepare` then takes from `raw` when present: the
    memory loader's prepared rows (harness/data/memory.py) compute it once per row."""

    def collate(self, samples: list[dict], cameras: tuple[str, ...]) -> dict: ...

    def raw_frames(self, pixels: torch.Tensor) -> torch.Tensor: ...

    def collate_fields(self, samples: list[dict]) -> dict: ...

    def prepare(self, raw: dict, generator: torch.Generator) -> dict: ...

    def finish(self, batch: dict, dtype: torch.dtype) -> dict: ...

    def host_finish(self, batch: dict) -> dict:
        """What of `finish` the loader's workers run on the CPU after `prepare` with `preprocess: workers`
        (models.processing.ProcessorSteps: nothing); `finish` must accept its output."""
        ...

    def describe(self) -> dict: ...


class ModelFamily:
    """A model family: subclasses set `name`, `sizes` and `options_type` (a frozen dataclass read with
    models.schema) and implement the methods that raise NotImplementedError; the rest have defaults."""

    name: str
    sizes: tuple[str, ...]
    options_type: type

    # -- options
    def parse_options(self, options: Any):
        """A rung's cumulative options mapping as `options_type`; raises SchemaError (key relative to the
        options mapping)."""
        return parse(self.options_type, options)

    def unsupported_reason(self, options, backend: str, capabilities: frozenset[str]) -> str | None:
        """Why these options cannot train on this backend (given the target's capabilities), or None."""
        return None

    def parity_tolerance(self, baseline, options, dtype: str) -> tuple[float, str]:
        """Largest relative loss difference to the baseline rung that is still the same math, and why."""
        raise NotImplementedError

    def rung_notes(self, previous: dict | None, options: dict, workload: Workload, processes: int = 1) -> list[str]:
        """Analytic remarks on what a rung changes, for tables (raw option mappings in), for a rung run on `processes`
        data-parallel processes."""
        return []

    # -- knobs: what the harness asks instead of reading option values by name (raw option mappings in and out)
    def knobs(self, options: dict) -> Knobs:
        """What a rung's cumulative options set (raises SchemaError on options this family cannot read)."""
        return Knobs()

    def recompute_groups(self) -> dict[str, tuple[str, ...]]:
        """Disjoint module-name pattern groups that `vlabench recompute-sweep` recomputes one at a time; empty
        when the family has no recompute-by-pattern option."""
        return {}

    def recompute_options(self, patterns: tuple[str, ...]) -> dict:
        """The options that, merged over a rung's, recompute exactly the modules matching `patterns` (nothing
        when empty). Only asked of a family with recompute groups. The default writes the conventional option
        `recompute: {patterns: [...]}` (or `recompute: none`); a family spelling it otherwise overrides this."""
        if not self.recompute_groups():
            raise NotImplementedError(f"{self.name} has no recompute option")
        return {"recompute": {"patterns": list(patterns)} if patterns else "none"}

    def micro_batch_options(self, micro_batches: int) -> dict | None:
        """The options that, merged over a rung's, run its step in `micro_batches` equal slices of the batch (the
        memory planner's other choice besides recompute); None: the family's step cannot split its batch."""
        return None

    def compile_modes(self) -> tuple[str, ...]:
        """The values of the family's compile option, the one that compiles nothing first; empty without one.
        The default reads them off the `compile` field of `options_type` (a Literal), if it has one."""
        hint = _field_types(getattr(self, "options_type", None)).get("compile")
        return get_args(hint) if hint is not None else ()

    def compile_options(self, mode: str) -> dict:
        """The options that, merged over a rung's, set the compile mode (one of compile_modes())."""
        if not self.compile_modes():
            raise NotImplementedError(f"{self.name} has no compile option")
        return {"compile": mode}

    def ddp_flags(self, options) -> DdpFlags | None:
        """The rung's DistributedDataParallel flags, or None for DDP's defaults (several processes) or no
        DDP wrapper (one process). The default is the options' `ddp` field (a DdpFlags or None), if any."""
        return getattr(options, "ddp", None)

    # -- building and training
    def build(
        self, size: str, options, workload: Workload, device: torch.device, dtype: torch.dtype, seed: int
    ) -> Built:
        """The model with its options applied, initialised deterministically from `seed`, and what the
        options applied."""
        raise NotImplementedError

    def prepare_for_ddp(self, built: Built, flags: DdpFlags) -> list[str]:
        """Make the model fit DDP with these flags before it is wrapped (e.g. freeze parameters the loss
        never reaches when DDP will not search for unused ones); returns what changed."""
        return []

    def optimizer(self, model: nn.Module, options, workload: Workload, backend: str) -> torch.optim.Optimizer:
        """The reference training path's optimizer over the trainable parameters of `model` (the family's own
        module, never a DDP wrapper: parameter names are the family's)."""
        raise NotImplementedError

    def make_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, options) -> Step:
        """One training step on a batch, returning the detached loss: forward, backward, gradient clipping
        at 1.0 and the optimizer step, unless the family's options change how a step runs."""
        return standard_step(self.loss, model, optimizer)

    def make_batches(
        self, size: str, workload: Workload, n: int, device: torch.device, dtype: torch.dtype, seed: int
    ) -> list[dict]:
        """`n` synthetic training batches (inputs, noise, flow time), the same for every rung of a seed."""
        raise NotImplementedError

    def data_processor(self, size: str, workload: Workload, stats: dict, tokenizer: str | None) -> DataProcessor:
        """How raw dataset samples become this family's training batches (the reference's preprocessing),
        given the dataset's per-feature statistics and a tokenizer file or Hub id (None: a stand-in)."""
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: dict) -> torch.Tensor:
        """Scalar training loss for a batch (through `model(...)`, so that a DDP wrapper sees the forward). The
        default calls the model, whose forward is the loss."""
        return model(batch)

    def state_bytes(self, size: str, workload: Workload) -> int | None:
        """What training holds beside its activations (weights, gradients, AdamW's two moments), counted on a model
        built on the meta device, which allocates nothing (`training_state_bytes`); None: the family cannot say."""
        return None

    def flops_per_sample(self, size: str, workload: Workload) -> float:
        """Useful (analytic) training FLOPs per sample: no recompute, no padding."""
        raise NotImplementedError

    def eval_policy(self, checkpoint: str, **kwargs):
        """The family's policy for closed-loop evaluation (a models.policy.EvalPolicy): `checkpoint` a path, a
        Hub id or 'random'; keyword arguments device, dtype, model_size, tokenizer, seed, action_dim, and the
        family's own (e.g. options)."""
        raise NotImplementedError(f"no evaluation policy for {self.name}")

    def floor_ops(self, size: str, workload: Workload) -> tuple[list, list]:
        """Every forward GEMM (models.floor.Gemm) and attention call (models.floor.Attention) of a training step,
        for the kernel floor; backward is derived from them."""
        raise NotImplementedError(f"no kernel floor for {self.name} yet")

    # -- training to a checkpoint (`vlabench train`, `train-ladder`: TRAINING_METHODS); a family that keeps these
    # defaults is refused by those commands in one line before anything is built
    def export_weights(self, model: nn.Module, tensors: dict | None = None) -> dict:
        """`tensors` keyed by the built model's parameter names (default: the model's weights) under the plain
        model's names: the names a checkpoint stores, whatever the rung's switches did to the modules."""
        raise _no_training_method(self, "export_weights")

    def import_weights(self, model: nn.Module, plain: dict) -> dict:
        """Plain-named tensors under the built model's own names (the inverse of `export_weights`), for
        `model.load_state_dict(..., strict=True)`."""
        raise _no_training_method(self, "import_weights")

    def read_weights(self, path: str) -> tuple[dict, str]:
        """The plain-named weights of a checkpoint (a folder or file the family reads) and its model size."""
        raise _no_training_method(self, "read_weights")

    def save_policy(
        self, folder, plain: dict, size: str, workload: Workload, stats: dict, tokenizer: str | None, extra: dict
    ) -> None:
        """Write a checkpoint that `eval_policy` loads into the existing `folder`: the plain-named weights, the
        model size, the dataset's per-feature statistics, the tokenizer trained with and `extra` (the step, the
        recipe) for the record."""
        raise _no_training_method(self, "save_policy")

    def training_tokenizer(self, size: str) -> str | None:
        """The tokenizer a model of `size` trains with: 'bytes' (one token per UTF-8 byte, for a model without
        the checkpoint's vocabulary), or None for the family's own (a SentencePiece file the user names)."""
        raise _no_training_method(self, "training_tokenizer")


# What `vlabench train` and `train-ladder` call on a family beyond the methods every family implements.
TRAINING_METHODS = ("export_weights", "import_weights", "read_weights", "save_policy", "training_tokenizer")


def _no_training_method(family: ModelFamily, method: str) -> NotImplementedError:
    return NotImplementedError(f"the {family.name} family has no {method}: it cannot train to a checkpoint")


def unimplemented(family, methods: tuple[str, ...]) -> list[str]:
    """Which of `methods` the family leaves at ModelFamily's default (or lacks)."""
    out = []
    for name in methods:
        attr = getattr(family, name, None)
        if attr is None or getattr(attr, "__func__", attr) is getattr(ModelFamily, name, None):
            out.append(name)
    return out


def _field_types(options_type: type | None) -> dict:
    """The resolved field types of an options dataclass (Annotated stripped); empty when it has none."""
    if options_type is None:
        return {}
    try:
        return get_type_hints(options_type)
    except (NameError, TypeError):
        return {}


def training_state_bytes(model: nn.Module) -> int:
    """Every weight at its dtype, and for each trainable one its gradient and AdamW's two moments (torch keeps
    them in the weight's dtype)."""
    return sum(p.numel() * p.element_size() * (4 if p.requires_grad else 1) for p in model.parameters())


def standard_step(
    loss_fn: Callable[[nn.Module, dict], torch.Tensor],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    clip: float = 1.0,
    micro_batches: int = 1,
) -> Step:
    """loss and backward (in `micro_batches` slices of the batch), clip the gradient norm, optimizer step, drop the
    gradients."""
    params = [p for p in model.parameters() if p.requires_grad]

    def step(batch: dict) -> torch.Tensor:
        loss = forward_backward(loss_fn, model, split_batch(batch, micro_batches))
        clip_and_step(optimizer, params, clip)
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


def split_batch(batch: dict, parts: int) -> list[dict]:
    """`batch` as `parts` equal micro-batches along the first dimension, which every tensor of a training batch
    shares (views: nothing is copied, so slices of a CUDA graph's static inputs stay static); other entries are
    shared. Raises ValueError when the batch does not divide evenly."""
    if parts == 1:
        return [batch]
    sizes = {v.shape[0] for v in batch.values() if isinstance(v, torch.Tensor)}
    if len(sizes) != 1 or next(iter(sizes)) % parts:
        raise ValueError(
            f"micro_batches: {parts} needs a batch whose tensors share a first dimension that {parts} divides; "
            f"got first dimensions {sorted(sizes)}"
        )
    chunks = {k: v.chunk(parts) if isinstance(v, torch.Tensor) else None for k, v in batch.items()}
    return [{k: chunks[k][i] if chunks[k] is not None else v for k, v in batch.items()} for i in range(parts)]


def forward_backward(loss_fn: Callable[[nn.Module, dict], torch.Tensor], model: nn.Module, parts: list[dict]):
    """Forward and backward of each micro-batch in turn, each loss divided by their number, so that for a loss
    that is a mean over equal micro-batches the summed gradients and the returned (detached) loss are the whole
    batch's, with one micro-batch's activations alive at a time. A data-parallel wrapper all-reduces on the last
    backward only."""
    total = None
    for i, part in enumerate(parts):
        quiet = hasattr(model, "no_sync") and i < len(parts) - 1
        with model.no_sync() if quiet else nullcontext():
            loss = loss_fn(model, part)
            if len(parts) > 1:
                loss = loss / len(parts)
            loss.backward()
        total = loss.detach() if total is None else total + loss.detach()
    return total


def clip_and_step(optimizer: torch.optim.Optimizer, params: list[torch.Tensor], clip: float) -> None:
    """Clip the gradients' total norm to `clip`, then the optimizer step. An optimizer that clips inside its own
    update (models/clipped_adamw.py) does both in its step, to the norm it was made with."""
    if isinstance(optimizer, ClipsInStep):
        if optimizer.max_norm != clip:
            raise ValueError(f"the optimizer clips to {optimizer.max_norm}, the step asks for {clip}")
        optimizer.step()
        return
    torch.nn.utils.clip_grad_norm_(params, clip)
    optimizer.step()


__all__ = [
    "Applied",
    "Built",
    "CommHook",
    "DataProcessor",
    "DdpFlags",
    "Dtype",
    "Knobs",
    "ModelFamily",
    "SchemaError",
    "Step",
    "clip_and_step",
    "forward_backward",
    "split_batch",
    "TORCH_DTYPES",
    "Workload",
    "standard_step",
]
