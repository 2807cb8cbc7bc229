"""What a training run trains: one rung of a scenario, built exactly as the ladder builds it (the family's model
with the rung's options, its optimizer and step, the rung's input pipeline), on a dataset, with a recipe."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from models import ModelFamily, get_family
from models.family import TORCH_DTYPES, TRAINING_METHODS, Built, Step, clip_and_step, forward_backward, unimplemented
from models.tokenizers import BUILTIN

from ..data.pipeline import DatasetFeed, feed_kind, reading
from ..errors import InputError
from ..ladder.rung import dataset_feed, wrap_ddp
from ..ladder.runner import unsupported_reason, with_substitutes
from ..ladder.sabotage import apply_sabotage
from ..machine.hardware import Device, Target, capabilities, get_device
from ..scenario import Scenario
from ..spec import RungSpec, scenario_spec
from .recipe import Ema, Recipe, optimizer_mismatch


@dataclass
class TrainPlan:
    """One `vlabench train`: the scenario's rung, the data, the length and the recipe."""

    scenario: Scenario
    rung: str
    target: Target
    dataset: str
    steps: int
    out: Path
    recipe: Recipe = dataclasses.field(default_factory=Recipe)
    batch_size: int | None = None  # samples per optimizer step; default: the target's workload batch
    grad_accum: int = 1  # micro-batches per optimizer step (each batch_size / grad_accum samples)
    model_size: str | None = None  # default: the target's workload size
    checkpoint_every: int | None = None  # default: only at the end
    keep: int = 2  # newest checkpoints kept
    resume: bool = False
    init: str = "random"  # or a checkpoint (openpi or LeRobot layout) to fine-tune from
    tokenizer: str | None = None  # a SentencePiece file, 'bytes' or 'pieces'; default: chosen by resolve_tokenizer
    workers: int | None = None  # DataLoader workers; default: the rung's loader option
    loader: dict | None = None  # loader options over the rung's (a train-ladder's, the same for every rung)
    log_every: int | None = None
    seed: int | None = None  # the training's seed (weights, sample order, the steps' draws); default: the workload's


def resolve_tokenizer(plan: TrainPlan, family: ModelFamily, size: str) -> str:
    """The tokenizer to train with, one the evaluation policy will use too: a SentencePiece file (copied into
    every checkpoint), or one that needs no file and which the checkpoint names (models/tokenizers.py: 'bytes',
    UTF-8 bytes, the default for a model without PaliGemma's vocabulary; 'pieces', hashed word pieces). A
    PaliGemma-sized model needs the real tokenizer: --tokenizer, or tokenizer.model in the --init checkpoint."""
    if plan.tokenizer:
        if plan.tokenizer not in BUILTIN and not Path(plan.tokenizer).is_file():
            raise InputError(
                "--tokenizer", None, "a SentencePiece model file, 'bytes' or 'pieces'", f"{plan.tokenizer!r}"
            )
        return plan.tokenizer
    if family.training_tokenizer(size) == "bytes":
        return "bytes"
    if plan.init != "random":
        found = Path(plan.init) / "tokenizer.model"
        if found.is_file():
            return str(found)
    raise InputError(
        "--tokenizer",
        None,
        f"PaliGemma's tokenizer.model for the {size} model (its vocabulary is PaliGemma's), or 'bytes'",
        "none given and none in --init",
    )


def train_spec(plan: TrainPlan) -> tuple[RungSpec, dict]:
    """The rung's spec as the ladder runs it (harness/spec.py scenario_spec) on the dataset, and what was
    substituted for the target; one line if the rung cannot train on the target."""
    scenario, target = plan.scenario, plan.target
    rungs = {r.name: r for r in scenario.ladder}
    if plan.rung not in rungs:
        raise InputError("--rung", None, f"a rung of {scenario.name} ({', '.join(rungs)})", repr(plan.rung))
    caps = capabilities(target)
    rung, substituted = with_substitutes(scenario, target, rungs[plan.rung], caps)
    reason = unsupported_reason(scenario, target, rung, caps)
    if reason:
        raise InputError("--rung", None, f"a rung that trains on {target.name}", f"{plan.rung}: {reason}")
    family = get_family(scenario.model)
    if unimplemented(family, TRAINING_METHODS):  # the protocol's defaults raise; refuse before building anything
        raise InputError(
            scenario.path, "model", "a family whose checkpoints vlabench train writes (pi05)", f"{family.name}"
        )
    spec = scenario_spec(scenario, target, rung, plan.batch_size, plan.model_size, plan.grad_accum)
    # a captured optimizer step reads the schedule's rate from a device tensor (recipe.set_lr); micro-batches
    # accumulate outside any graph, so a graphed rung takes its whole batch in one step
    if family.knobs(spec.options).cuda_graphs and spec.grad_accum > 1:
        raise InputError("--grad-accum", None, "1 for a rung with CUDA graphs", str(spec.grad_accum))
    tokenizer = resolve_tokenizer(plan, family, spec.workload.model_size)
    data = reading(spec.workload.data, str(plan.dataset), tokenizer=tokenizer)
    loader = dict(spec.loader)
    if feed_kind(data, loader) == "synthetic":
        loader["kind"] = "torch"  # a rung measured on synthetic batches trains on the dataset through LeRobot's path
    loader.update(plan.loader or {})
    if plan.workers is not None:
        loader["workers"] = plan.workers
    seed = spec.workload.seed if plan.seed is None else plan.seed
    workload = dataclasses.replace(spec.workload, data=data, seed=seed)
    return dataclasses.replace(spec, workload=workload, loader=loader, rung=plan.rung), substituted


@dataclass
class Training:
    """A built rung ready to train: the model (DDP-wrapped when the rung says so), the family's own module, its
    optimizer and step, the dataset feed, the EMA and what the test sabotage did."""

    family: ModelFamily
    built: Built
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    step: Step
    feed: DatasetFeed
    device: Device
    ema: Ema | None
    sabotage: dict | None
    param_names: dict[int, str]  # id(parameter) -> its name in the built model
    grad_accum: int = 1

    def fetch(self, step: int) -> tuple[dict | list[dict], float]:
        """Step `step`'s batch (a list of micro-batches with gradient accumulation) and the seconds waited."""
        if self.grad_accum == 1:
            return self.feed.fetch(step)
        fetched = [self.feed.fetch(step * self.grad_accum + i) for i in range(self.grad_accum)]
        return [batch for batch, _ in fetched], sum(wait for _, wait in fetched)


def build_training(spec: RungSpec, recipe: Recipe, start: int, weights: dict | None) -> Training:
    """The rung's model, optimizer, step and feed as harness/ladder/rung.py builds them, with `weights` (plain names)
    loaded first and the feed starting at step `start`. With gradient accumulation the step is the standard
    one (loss, backward, clip at 1.0, optimizer) over the sum of its micro-batches' gradients."""
    family, workload = get_family(spec.model), spec.workload
    device = get_device(spec.backend)
    dtype = TORCH_DTYPES[workload.dtype]
    options = family.parse_options(spec.options)
    built = family.build(workload.model_size, options, workload, device.torch_device, dtype, workload.seed)
    if weights is not None:
        built.model.load_state_dict(family.import_weights(built.model, weights), strict=True)
    sabotage = apply_sabotage(family, built.model)  # TEST-ONLY; before the optimizer, as in the ladder
    model, flags = built.model, family.ddp_flags(options)
    if flags is not None:
        family.prepare_for_ddp(built, flags)
        model = wrap_ddp(model, flags, built.applied, device)
    optimizer = family.optimizer(built.model, options, workload, spec.backend)
    mismatch = optimizer_mismatch(optimizer, recipe)
    if mismatch:
        raise InputError("--rung", None, "the recipe's optimizer", mismatch)
    feed = dataset_feed(spec, family, device, start=start * spec.grad_accum)
    named = dict(built.model.named_parameters())
    ema = Ema(named, recipe.ema_decay) if recipe.ema_decay else None
    names = {id(p): n for n, p in named.items()}
    accum = spec.grad_accum
    step = (
        family.make_step(model, optimizer, options)
        if accum == 1
        else accumulating_step(family, model, optimizer, recipe.clip_norm)
    )
    return Training(family, built, model, optimizer, step, feed, device, ema, sabotage, names, accum)


def accumulating_step(family: ModelFamily, model: torch.nn.Module, optimizer, clip: float) -> Step:
    """The standard step (models/family.py standard_step) over several micro-batches fetched apart: each one's
    loss, divided by their number, is backpropagated (a DDP wrapper all-reduces only on the last), then one clip
    and one update."""
    params = [p for p in model.parameters() if p.requires_grad]

    def step(batches: list[dict]) -> torch.Tensor:
        total = forward_backward(family.loss, model, batches)
        clip_and_step(optimizer, params, clip)
        optimizer.zero_grad(set_to_none=True)
        return total

    return step
