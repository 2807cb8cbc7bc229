"""`vlabench train-ladder`: train -> evaluate -> gate as one scenario (its `train:` and `eval:` blocks).

Each rung trains identically (the target workload's dataset, seed, batch and size, the block's steps and recipe;
only the rung's options differ) with `vlabench train`'s loop, and its last checkpoint is evaluated in LIBERO with
`vlabench eval`'s runner (a checkpoint holds the plain model's weights whatever the rung, so every rung's policy
runs the same inference). Against the reference rung (default: the ladder's first) each rung gets
- its speed: training samples/s (the median step of its run) and the speedup over the reference's;
- the convergence check (harness/train/convergence.py): smoothed final loss within the tolerance either way;
- the success gate (harness/judge/gates.py): Fisher's exact test of its successes per suite against the reference's.
OUT/train-ladder.json (kind `train-ladder`) is rewritten atomically after every rung; a rung that fails in training
or evaluation is recorded with its error and the ladder goes on; each suite is evaluated on its own, so that a
suite whose evaluation fails is recorded with its error beside the others' counts. OUT/<rung>/ holds the rung's
training run (train.json, checkpoints/) and its evaluation (eval.json, or eval-<suite>.json per suite); with
--seeds N every rung trains and is evaluated once per seed, each seed's in OUT/seed-<S>/<rung>/, and the rungs are
judged over the seeds (harness/judge/train_ladder.py).
"""

from __future__ import annotations

import dataclasses
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from models.schema import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, SchemaError, parse

from ..data.pipeline import LoaderOptions
from ..errors import InputError
from .convergence import DEFAULT_TOLERANCE
from .recipe import Recipe

RESULT_FILE = "train-ladder.json"
DEMONSTRATED = "demonstrated"  # --tasks: each suite's tasks that the training dataset has demonstrations of


@dataclass(frozen=True)
class TrainBlock:
    """A scenario's `train:` block (its recipe values default to openpi's pi05_libero, harness/train/recipe.py)."""

    steps: Annotated[int, AT_LEAST_ONE]
    rungs: tuple[str, ...] | None = None  # default: every rung of the ladder, in its order
    reference: str | None = None  # default: the ladder's first rung
    peak_lr: Annotated[float, POSITIVE] | None = None
    warmup_steps: Annotated[int, AT_LEAST_ONE] | None = None
    decay_steps: Annotated[int, AT_LEAST_ONE] | None = None  # default: the block's steps
    decay_lr: Annotated[float, NON_NEGATIVE] | None = None
    ema_decay: Annotated[float, POSITIVE] | None = None
    workers: Annotated[int, NON_NEGATIVE] | None = None  # loader workers (memory: the decode's; default: the rung's)
    # loader options (kind, pin_memory, prefetch_factor, buffers) for every rung over its own: the rungs train
    # on one data path, so that their speeds compare their steps
    loader: dict[str, Any] | None = None
    # the first stored initial state of the dataset's demonstrations (`make-dataset --first-trial`): the
    # evaluation's trials must stay below it, so no evaluated episode starts where a demonstration did
    demonstrations_from_trial: Annotated[int, NON_NEGATIVE] | None = None
    # the prompt tokenizer of every rung (vlabench train --tokenizer): 'bytes', 'pieces' or a SentencePiece file
    tokenizer: str | None = None
    convergence_tolerance: Annotated[float, NON_NEGATIVE] = DEFAULT_TOLERANCE
    success_tolerance: Annotated[float, NON_NEGATIVE] = 0.05


@dataclass(frozen=True)
class LadderPlan:
    """One `vlabench train-ladder` run: what trains, on which data, how it is evaluated, where it goes."""

    scenario: object  # harness.scenario.Scenario
    target: object  # harness.machine.hardware.Target
    block: TrainBlock
    rungs: tuple[str, ...]
    reference: str
    dataset: str
    steps: int
    recipe: Recipe
    eval_settings: dict  # suites, tasks, trials, workers, seed (the scenario's eval block and the flags)
    out: Path
    resume: bool = False  # continue the train-ladder in `out`
    assets: str | None = None
    device: str | None = None
    ray: str | None = None  # the Ray cluster the rungs are evaluated on (harness/eval/ray_pool.py); None: locally
    max_steps: int | None = None  # replaces the suites' step limits: smoke runs, not the protocol
    workers: int | None = None  # DataLoader workers of every rung (the block's, or --loader-workers)
    seed: int = 0  # every rung's training seed (the workload's, or --seed); with --seeds, the first
    # --seeds N: every rung trains with each of these seeds, each seed's runs in OUT/seed-<S>/<rung>/ (empty: one
    # seed, `seed`, its runs in OUT/<rung>/ as before --seeds)
    seeds: tuple[int, ...] = ()
    # --curve-every K: each rung also keeps the checkpoint of every K-th step and evaluates it as the last one is,
    # its record's `curve` the success on each suite against the training's wall time and steps (None: the last only)
    curve_every: int | None = None

    def training_seeds(self) -> tuple[int, ...]:
        return self.seeds or (self.seed,)


def train_block(scenario) -> TrainBlock:
    """The scenario's `train:` block checked (one line naming the file and key otherwise)."""
    raw = scenario.train
    if raw is None:
        raise InputError(scenario.path, "train", "a train block (steps, rungs, recipe ...)", "none")
    try:
        block = parse(TrainBlock, raw, "train")
    except SchemaError as e:
        raise InputError(scenario.path, e.key, e.expected, e.got) from None
    names = scenario.rung_names()
    for key, values in (("train.rungs", block.rungs or ()), ("train.reference", (block.reference or names[0],))):
        unknown = [v for v in values if v not in names]
        if unknown:
            raise InputError(scenario.path, key, "rungs of the ladder (" + ", ".join(names) + ")", ", ".join(unknown))
    if block.loader:
        try:
            parse(LoaderOptions, block.loader, "train.loader")
        except SchemaError as e:
            raise InputError(scenario.path, e.key, e.expected, e.got) from None
    if block.ema_decay is not None and not block.ema_decay < 1:
        raise InputError(scenario.path, "train.ema_decay", "a decay in (0, 1)", str(block.ema_decay))
    return block


def block_recipe(block: TrainBlock, steps: int) -> Recipe:
    """openpi's recipe with the block's values; the cosine decays over the run's steps unless the block says."""
    values = {k: getattr(block, k) for k in ("peak_lr", "warmup_steps", "decay_lr", "ema_decay")}
    values = {k: v for k, v in values.items() if v is not None}
    return dataclasses.replace(Recipe(), decay_steps=block.decay_steps or steps, **values)


def demonstrated_tasks(dataset: str | Path, suite: str) -> list[int]:
    """The suite's task indices whose instruction the dataset's tasks hold (`--tasks demonstrated`: a policy trained
    on demonstrations of some of a suite's tasks, as the scripted expert's of libero_goal, is evaluated on those)."""
    from ..data.dataset import load_meta  # here: the reader imports pyarrow and PyAV
    from ..eval import sim
    from ..eval.env import suite_tasks  # here: LIBERO's benchmark tables

    sim.use_libero_config()
    shown = set(load_meta(Path(dataset)).tasks)
    return [task.index for task in suite_tasks(suite) if task.language in shown]


def tasks_of_suite(plan: LadderPlan, suite: str) -> list[int] | None:
    """The task indices a rung is evaluated on in `suite`: the ladder's (the same in every suite; None: all), or
    with `demonstrated` the suite's tasks the training dataset has demonstrations of."""
    tasks = plan.eval_settings.get("tasks")
    return demonstrated_tasks(plan.dataset, suite) if tasks == DEMONSTRATED else tasks


def result_path(plan: LadderPlan) -> Path:
    return plan.out / RESULT_FILE


def rung_dir(plan: LadderPlan, rung: str, seed: int | None = None) -> Path:
    """OUT/<rung>/ of a one-seed ladder; OUT/seed-<S>/<rung>/ of one with --seeds (default seed: the first)."""
    if not plan.seeds:
        return plan.out / rung
    return plan.out / f"seed-{plan.seeds[0] if seed is None else seed}" / rung


def eval_path(plan: LadderPlan, rung: str, suite: str, seed: int | None = None) -> Path:
    """The rung's evaluation on one suite: eval.json in a ladder of one suite (the layout of the ladders before
    several suites), eval-<suite>.json each in a ladder of several."""
    name = "eval.json" if len(plan.eval_settings["suites"]) == 1 else f"eval-{suite}.json"
    return rung_dir(plan, rung, seed) / name


def curve_eval_path(plan: LadderPlan, rung: str, suite: str, step: int, seed: int | None = None) -> Path:
    """The evaluation of the rung's checkpoint at `step` for its success curve: eval_path's name with the step."""
    plain = eval_path(plan, rung, suite, seed)
    return plain.with_name(f"{plain.stem}-step-{step:08d}.json")


def missing_suites(plan: LadderPlan, record: dict) -> list[str]:
    """The ladder's suites a rung's record has no success rate of (not evaluated yet, or its evaluation failed)."""
    rates = record.get("success_rate") or {}
    return [suite for suite in plan.eval_settings["suites"] if suite not in rates]


def error_text(exc: BaseException) -> str:
    """One line for the result file: the exception and where it was raised."""
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" (at {Path(where[0].filename).name}:{where[0].lineno})" if where else ""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}{at}"
