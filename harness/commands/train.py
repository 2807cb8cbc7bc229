"""`vlabench train` and `vlabench train-check`: their arguments and commands (registered in harness/cli.py)."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

from .. import kinds
from ..arguments import renamed_flag, resolve_target, workload_flag
from ..data.errors import DatasetError
from ..errors import InputError, UsageError
from ..outputs import at_least, check_writable, file_name
from ..results import load_result
from ..scenario import load_scenario
from ..train.convergence import DEFAULT_TOLERANCE, check_convergence, convergence_table
from ..train.loop import RESULT_FILE, train
from ..train.recipe import OPENPI_PI05_LIBERO, Recipe
from ..train.report import train_table
from ..train.setup import TrainPlan


def add_train_arguments(p) -> None:
    r = OPENPI_PI05_LIBERO
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--rung", required=True, help="the rung whose options train (built exactly as the ladder builds it)")
    p.add_argument("--dataset", required=True, metavar="PATH", help="LeRobotDataset v3.0 folder to train on")
    p.add_argument("--steps", type=int, required=True, metavar="N", help="optimizer steps to train to")
    p.add_argument("--target", help="target name (default: auto-detect)")
    p.add_argument("--batch-size", type=int, metavar="B", help="samples per step (default: the target's workload)")
    p.add_argument("--grad-accum", type=int, default=1, metavar="N",
                   help="micro-batches per step, each B/N samples (default 1: the ladder's own step)")  # fmt: skip
    p.add_argument("--model-size", help="model size (default: the target's workload; pi05: full, small, tiny)")
    p.add_argument("--checkpoint-every", type=int, metavar="K", help="save every K steps (always at the end)")
    p.add_argument("--keep-checkpoints", type=int, default=2, metavar="N", help="newest checkpoints kept (default 2)")
    p.add_argument("--out", type=Path, help="run folder: checkpoints/ and train.json (default runs/train-...)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--init", default="random", help="random, or a checkpoint (openpi or LeRobot layout) to fine-tune")
    p.add_argument("--tokenizer", help="SentencePiece tokenizer.model, 'bytes' or 'pieces' (hashed word pieces, "
                   "about a SentencePiece vocabulary's token count; default: bytes for a model without PaliGemma's "
                   "vocabulary, else the tokenizer.model of --init)")  # fmt: skip
    renamed_flag(p, "--loader-workers", "--workers", type=int, metavar="N",
                 help="DataLoader worker processes (default: the rung's loader option)")  # fmt: skip
    p.add_argument("--loader", choices=("torch", "async", "memory"), help="the data path (default: the rung's; "
                   "memory: every frame decoded once and held on the device, docs/data.md)")  # fmt: skip
    p.add_argument("--prepared-rows", action="store_true", help="with --loader memory: every row's fields and "
                   "prompt tokens prepared once, not per batch (the loader option prepared_rows, docs/data.md)")  # fmt: skip
    p.add_argument("--log-every", type=int, metavar="N", help="a progress line every N steps (default: steps/20)")
    p.add_argument("--seed", type=int, metavar="N", help="the training's seed: initial weights, sample order, the "
                   "steps' noise and time draws (default: the workload's seed)")  # fmt: skip
    p.add_argument("--peak-lr", type=float, default=r.peak_lr, help=f"default {r.peak_lr:g} (openpi pi05_libero)")
    p.add_argument("--warmup-steps", type=int, default=r.warmup_steps, help=f"default {r.warmup_steps} (openpi)")
    p.add_argument("--decay-steps", type=int, default=r.decay_steps, help=f"default {r.decay_steps} (openpi)")
    p.add_argument("--decay-lr", type=float, default=r.decay_lr, help=f"default {r.decay_lr:g} (openpi)")
    p.add_argument("--ema-decay", default=str(r.ema_decay), help=f"EMA decay or 'none' (default {r.ema_decay}, openpi)")


def _recipe(args) -> Recipe:
    at_least("--peak-lr", args.peak_lr, 1e-12, "a positive learning rate")
    at_least("--decay-lr", args.decay_lr, 0, "a non-negative learning rate")
    at_least("--warmup-steps", args.warmup_steps, 1, "a positive number of steps")
    at_least("--decay-steps", args.decay_steps, args.warmup_steps, "decay steps >= warm-up steps")
    ema = None
    if args.ema_decay.lower() not in ("none", "off", "0"):
        try:
            ema = float(args.ema_decay)
        except ValueError:
            ema = -1.0
        if not 0 < ema < 1:
            raise InputError("--ema-decay", None, "a decay in (0, 1) or 'none'", repr(args.ema_decay))
    return Recipe(
        peak_lr=args.peak_lr,
        warmup_steps=args.warmup_steps,
        decay_steps=args.decay_steps,
        decay_lr=args.decay_lr,
        ema_decay=ema,
    )


def _check_dataset(path: str) -> None:
    """A missing or broken dataset is one line before anything is built."""
    from ..data.dataset import preflight  # here, not at the top: the reader imports pyarrow and PyAV (0.1 s)

    if not Path(path).exists():
        raise DatasetError(
            path,
            None,
            f"a LeRobotDataset v3.0 folder (make one: vlabench make-dataset --source synthetic --episodes 20 --out {path})",
            "no such folder",
        )
    preflight(path)


def plan_from_args(args):
    at_least("--steps", args.steps, 1, "a positive number of steps")
    workload_flag("--batch-size", "batch_size", args.batch_size)
    at_least("--checkpoint-every", args.checkpoint_every, 1, "a positive number of steps")
    at_least("--keep-checkpoints", args.keep_checkpoints, 1, "at least one checkpoint")
    at_least("--loader-workers", args.loader_workers, 0, "a non-negative number of workers")
    at_least("--grad-accum", args.grad_accum, 1, "a positive number of micro-batches")
    at_least("--log-every", args.log_every, 1, "a positive number of steps")
    workload_flag("--seed", "seed", args.seed)
    if args.prepared_rows and args.loader != "memory":
        raise InputError("--prepared-rows", None, "--loader memory beside it", f"--loader {args.loader or 'unset'}")
    recipe = _recipe(args)
    scenario = load_scenario(args.scenario)
    target, error = resolve_target(scenario, args.target)
    if error:
        raise UsageError(error)  # already one line naming the flag or the file
    _check_dataset(args.dataset)
    if args.init != "random" and not Path(args.init).exists():
        raise InputError("--init", None, "random or an existing checkpoint folder or .safetensors file", args.init)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = (
        args.out
        or Path("runs") / f"train-{file_name(scenario.name, scenario.path, 'name')}-{args.rung}-{target.name}-{stamp}"
    )
    check_writable(Path(out) / "train.json", "--out")
    return TrainPlan(
        scenario=scenario,
        rung=args.rung,
        target=target,
        dataset=args.dataset,
        steps=args.steps,
        out=Path(out),
        recipe=recipe,
        batch_size=args.batch_size,
        grad_accum=args.grad_accum,
        model_size=args.model_size,
        checkpoint_every=args.checkpoint_every,
        keep=args.keep_checkpoints,
        resume=args.resume,
        init=args.init,
        tokenizer=args.tokenizer,
        workers=args.loader_workers,
        loader=_loader_flags(args),
        log_every=args.log_every,
        seed=args.seed,
    )


def _loader_flags(args) -> dict | None:
    """--loader and --prepared-rows as loader options over the rung's (None: the rung's own)."""
    if not args.loader:
        return None
    return {"kind": args.loader, **({"prepared_rows": True} if args.prepared_rows else {})}


def cmd_train(args) -> int:
    plan = plan_from_args(args)
    try:
        result = train(plan, ["vlabench", *getattr(args, "argv", sys.argv[1:])])
    except KeyboardInterrupt:
        print(f"\ninterrupted: {plan.out / RESULT_FILE} holds the steps done; --resume continues from the last "
              "checkpoint", file=sys.stderr)  # fmt: skip
        return 130
    print()
    print(train_table(result))
    last = result["train"]["checkpoints"][-1]["path"]
    print(f"\nresult: {plan.out / RESULT_FILE}")
    print(f"evaluate: vlabench eval --suite libero_spatial --policy {result['workload']['model']} --checkpoint {last}")
    return 0 if result["train"].get("final_loss") is not None else 1


def add_train_check_arguments(p) -> None:
    p.add_argument("results", nargs="+", type=Path, help="train results (train.json) of the rungs to check")
    p.add_argument("--reference", required=True, type=Path, help="the reference run's train.json (e.g. community)")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                   help=f"largest relative difference of the smoothed final loss (default {DEFAULT_TOLERANCE:g})")  # fmt: skip


def cmd_train_check(args) -> int:
    at_least("--tolerance", args.tolerance, 0, "a non-negative relative tolerance")
    loaded = []
    for path in [args.reference, *args.results]:
        result = load_result(path)
        kinds.require(result, "train", str(path), "a `vlabench train` result (train)")
        loaded.append(result)
    reference, runs = loaded[0], loaded[1:]

    def label(path, result) -> str:
        sabotaged = " SABOTAGED" if result["train"].get("test_train_sabotage") else ""
        return f"{result['train'].get('rung')}{sabotaged} ({Path(path).name if Path(path).name != 'train.json' else Path(path).parent.name})"

    ref_name = label(args.reference, reference)
    checks = [
        check_convergence(r, reference, args.tolerance, names=(label(p, r), ref_name))
        for p, r in zip(args.results, runs)
    ]
    print(convergence_table(checks))
    return 0 if all(c.passed for c in checks) else 1
