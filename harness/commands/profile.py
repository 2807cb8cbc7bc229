"""`vlabench profile`: where one rung's step goes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..arguments import resolve_target, workload_flag
from ..data.pipeline import feed_kind
from ..errors import EXIT_OK, fail
from ..ladder.memory_plan import MemoryPlanner, memory_line
from ..ladder.profile import data_path_rate, data_rate_table, profile_rung, profile_table
from ..ladder.runner import check_dataset, unsupported_reason, with_substitutes
from ..machine.hardware import capabilities, get_device
from ..outputs import at_least, check_out_file
from ..results import _write_atomic, provenance
from ..scenario import load_scenario, with_dataset
from ..spec import scenario_spec


def add_profile_arguments(prof) -> None:
    prof.add_argument("scenario", help="scenario YAML file")
    prof.add_argument("--rung", required=True, help="the rung to profile")
    prof.add_argument("--target", help="target name; default: auto-detect")
    prof.add_argument("--dataset", metavar="PATH", help="read batches from this dataset (as vlabench run)")
    prof.add_argument(
        "--batch-size", type=int, help="override the workload's batch size (e.g. to see launch-bound steps)"
    )
    prof.add_argument("--steps", type=int, default=5, help="profiled steps (default 5)")
    prof.add_argument("--top", type=int, default=15, help="kernels listed by time (default 15)")
    prof.add_argument("--synthetic", action="store_true", help="the compute alone: synthetic batches on the device")
    prof.add_argument(
        "--data-only",
        action="store_true",
        help="the rung's input pipeline alone, no model: its batches fetched back to back (--batches of them), "
        "the samples/s it can feed",
    )
    prof.add_argument("--batches", type=int, default=50, help="batches timed with --data-only (default 50)")
    prof.add_argument("--out", type=Path, help="also write the profile as JSON")
    prof.add_argument("--overwrite", action="store_true", help="replace an existing --out (without it: refuse)")


def cmd_profile(args) -> int:
    at_least("--steps", args.steps, 1, "a positive number of steps")
    workload_flag("--batch-size", "batch_size", args.batch_size)
    at_least("--top", args.top, 1, "a positive number of kernels")
    at_least("--batches", args.batches, 2, "at least 2 batches")
    if args.data_only and args.synthetic:
        return fail("--data-only: times the dataset's input pipeline; --synthetic has none")
    if args.out:
        check_out_file(args.out, overwrite=args.overwrite)
    scenario = load_scenario(args.scenario)
    if args.dataset:
        scenario = with_dataset(scenario, args.dataset)
    target, error = resolve_target(scenario, args.target)
    if error:
        return fail(error)
    rungs = {r.name: r for r in scenario.ladder}
    if args.rung not in rungs:
        return fail(f"--rung: expected a rung of {scenario.name} ({', '.join(rungs)}), got {args.rung!r}")
    caps = capabilities(target)
    rung, _ = with_substitutes(scenario, target, rungs[args.rung], caps)
    rung, memory, too_big = planned_for_card(scenario, target, rung, args.batch_size)
    reason = too_big or unsupported_reason(scenario, target, rung, caps)
    if reason:
        return fail(f"{args.rung}: unsupported on {target.name}: {reason}")
    spec = scenario_spec(scenario, target, rung, batch_size=args.batch_size)
    if args.data_only:
        return data_only(args, scenario, target, rung, spec)
    if args.synthetic:  # the compute alone: batches made up front on the device
        spec = dataclasses.replace(spec, loader={**spec.loader, "kind": "synthetic"})
    result = profile_rung(spec, steps=args.steps, top=args.top)
    if memory is not None:
        result["memory_plan"] = memory
    batch_size = spec.workload.batch_size
    print(profile_table(f"{scenario.name}/{args.rung} on {target.name}, batch {batch_size}", result))
    write_profile(args, scenario, target, batch_size, result)
    return EXIT_OK


def planned_for_card(scenario, target, rung, batch_size: int | None):
    """The rung as `vlabench run` builds it on this card (its memory plan: micro-batches or recompute, printed), and
    the plan (None: nothing planned) and why it cannot fit (None: it can). A --batch-size override has no evidence to plan from: the rung as written."""
    if batch_size is not None:
        return rung, None, None
    workload = scenario_spec(scenario, target).workload_record()
    card_gib = get_device(target.backend, target_name=target.name).total_memory_gib()
    rung, plan, too_big = MemoryPlanner(scenario, workload, card_gib, target.name).apply(rung)
    if plan is not None:
        print(memory_line(plan))
    return rung, plan, too_big


def data_only(args, scenario, target, rung, spec) -> int:
    """`--data-only`: the rung's input pipeline timed alone (harness/ladder/profile.py data_path_rate)."""
    if feed_kind(spec.workload.data, spec.loader) == "synthetic":
        return fail(f"--data-only: {args.rung} reads synthetic batches; pass --dataset PATH or a workload data.dataset")
    check_dataset(scenario, spec.workload, [rung.name])
    result = data_path_rate(spec, args.batches)
    batch_size = spec.workload.batch_size
    print(data_rate_table(f"{scenario.name}/{args.rung} on {target.name}, batch {batch_size}", result))
    write_profile(args, scenario, target, batch_size, result)
    return EXIT_OK


def write_profile(args, scenario, target, batch_size: int, result: dict) -> None:
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        record = {"scenario": scenario.name, "rung": args.rung, "target": target.name, "batch_size": batch_size}
        _write_atomic(args.out, {**record, **result, "provenance": provenance(["vlabench", *args.argv])})
