"""What a training run trains: one rung of a scenario, built exactly as the ladder builds it (the family's model
with the rung's options, its optimizer and step, the rung's input pipeline), on a dataset, with a recipe."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from models import ModelFamily, get_family
from models.family import TORCH_DTYPES, Built, Step
from models.schema import parse

from ..data.pipeline import DatasetFeed, DataSpec, LoaderOptions, feed_kind
from ..errors import InputError
from ..hardware import Device, Target, capabilities, get_device
from ..rung import wrap_ddp
from ..runner import rung_spec, unsupported_reason, with_substitutes
from ..scenario import Scenario
from .recipe import Ema, Recipe, optimizer_mismatch
from .sabotage import apply_sabotage


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
    batch_size: int | None = None  # default: the target's workload batch
    model_size: str | None = None  # default: the target's workload size
    checkpoint_every: int | None = None  # default: only at the end
    keep: int = 2  # newest checkpoints kept
    resume: bool = False
    init: str = "random"  # or a checkpoint (openpi or LeRobot layout) to fine-tune from
    tokenizer: str | None = None  # a SentencePiece file or 'bytes'; default: chosen by resolve_tokenizer
    workers: int | None = None  # DataLoader workers; default: the rung's loader option
    log_every: int | None = None


def resolve_tokenizer(plan: TrainPlan, family: ModelFamily, size: str) -> str:
    """The tokenizer to train with, one the evaluation policy will use too: a SentencePiece file (copied into
    every checkpoint), or UTF-8 bytes for a model without PaliGemma's vocabulary (what the Pi0.5 policy uses
    for such a model). A PaliGemma-sized model needs the real tokenizer: --tokenizer, or tokenizer.model in
    the --init checkpoint."""
    if plan.tokenizer:
        if plan.tokenizer != "bytes" and not Path(plan.tokenizer).is_file():
            raise InputError("--tokenizer", None, "a SentencePiece model file or 'bytes'", f"{plan.tokenizer!r}")
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


def train_spec(plan: TrainPlan) -> tuple[dict, dict]:
    """The rung's spec as the ladder runs it (harness/runner.py rung_spec) on the dataset, and what was
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
    workload = {**scenario.workload_for(target.name).as_dict(), "model": scenario.model}
    for key, value in (("batch_size", plan.batch_size), ("model_size", plan.model_size)):
        if value is not None:
            workload[key] = value
    if workload["model_size"] not in family.sizes:
        raise InputError("--model-size", None, "one of " + ", ".join(family.sizes), repr(workload["model_size"]))
    data = workload.get("data") if isinstance(workload.get("data"), dict) else {}
    tokenizer = resolve_tokenizer(plan, family, workload["model_size"])
    workload["data"] = {**data, "dataset": str(plan.dataset), "tokenizer": tokenizer}
    workload["flops_per_sample"] = family.flops_per_sample(workload["model_size"], workload)
    spec = rung_spec(scenario, target, rung, workload)
    loader = dict(spec["loader"])
    if feed_kind(workload["data"], loader) == "synthetic":
        loader["kind"] = "torch"  # a rung measured on synthetic batches trains on the dataset through LeRobot's path
    if plan.workers is not None:
        loader["workers"] = plan.workers
    spec["loader"] = loader
    return {**spec, "rung": plan.rung}, substituted


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


def build_training(spec: dict, recipe: Recipe, start: int, weights: dict | None) -> Training:
    """The rung's model, optimizer, step and feed as harness/rung.py builds them, with `weights` (plain names)
    loaded first and the feed starting at batch `start`."""
    family = get_family(spec["model"])
    workload = spec["workload"]
    device = get_device(spec["backend"])
    dtype = TORCH_DTYPES[workload["dtype"]]
    options = family.parse_options(spec["options"])
    if getattr(options, "cuda_graphs", "none") != "none":
        raise InputError("--rung", None, "a rung without CUDA graphs", "a whole-step graph, which bakes in the lr")
    built = family.build(workload["model_size"], options, workload, device.torch_device, dtype, workload["seed"])
    if weights is not None:
        built.model.load_state_dict(family.import_weights(built.model, weights), strict=True)
    sabotage = apply_sabotage(family, built.model)  # TEST-ONLY; before the optimizer, as in the ladder
    model, flags = built.model, family.ddp_flags(options)
    if flags is not None:
        family.prepare_for_ddp(built, flags)
        model = wrap_ddp(model, flags, built.applied, device)
    optimizer = family.optimizer(built.model, options, workload, spec["backend"])
    mismatch = optimizer_mismatch(optimizer, recipe)
    if mismatch:
        raise InputError("--rung", None, "the recipe's optimizer", mismatch)
    feed = DatasetFeed(
        parse(DataSpec, workload["data"]),
        parse(LoaderOptions, spec["loader"]),
        family,
        workload["model_size"],
        workload,
        device.torch_device,
        dtype,
        workload["seed"],
        start=start,
    )
    named = dict(built.model.named_parameters())
    ema = Ema(named, recipe.ema_decay) if recipe.ema_decay else None
    names = {id(p): n for n, p in named.items()}
    step = family.make_step(model, optimizer, options)
    return Training(family, built, model, optimizer, step, feed, device, ema, sabotage, names)
