"""`vlabench recompute-sweep` and `vlabench recompute-plan`: what recomputing each module group costs, and the
cheapest groups under a memory budget."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from models import get_family

from .. import kinds
from ..arguments import resolve_target, workload_flag
from ..errors import EXIT_FAILED, EXIT_OK, fail
from ..ladder import runner  # runner.run_scenario, looked up when called: tests stand in for it
from ..ladder.runner import unsupported_reason, with_substitutes
from ..ladder.sweep import default_rung, plan_recompute, sweep_scenario, sweep_table
from ..machine.hardware import capabilities
from ..outputs import check_out_file, positive_seconds
from ..results import load_result
from ..scenario import load_scenario, with_dataset
from .run import default_out


def add_recompute_sweep_arguments(sweep) -> None:
    sweep.add_argument("scenario", help="scenario YAML file")
    sweep.add_argument("--target", help="target name; default: auto-detect")
    sweep.add_argument("--rung", help="rung whose options are the base (default: the first pattern-recompute rung)")
    sweep.add_argument(
        "--compile",
        metavar="MODE",
        help="override the base's compile mode, one of the model family's (none avoids a compile per configuration)",
    )
    sweep.add_argument("--dataset", metavar="PATH", help="read batches from this dataset (as vlabench run)")
    sweep.add_argument(
        "--batch-size", type=int, help="samples per step, for every configuration (default: the target's workload)"
    )
    sweep.add_argument("--warmup-steps", type=int, help="untimed steps before timing (default: the workload's)")
    sweep.add_argument("--timed-steps", type=int, help="timed steps per configuration (default: the workload's)")
    sweep.add_argument("--out", type=Path, help="result JSON path")
    sweep.add_argument(
        "--rung-timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds before a configuration's process group is ended and recorded as timed out (default: none)",
    )
    sweep.add_argument("--overwrite", action="store_true", help="replace an existing --out (without it: refuse)")


def cmd_recompute_sweep(args) -> int:
    positive_seconds("--rung-timeout", args.rung_timeout)
    for flag, field in (
        ("--batch-size", "batch_size"),
        ("--warmup-steps", "warmup_steps"),
        ("--timed-steps", "timed_steps"),
    ):
        workload_flag(flag, field, getattr(args, field))
    scenario = load_scenario(args.scenario)
    if args.dataset:
        scenario = with_dataset(scenario, args.dataset)
    error = _sweep_knobs_error(get_family(scenario.model), scenario, args.compile)
    if error:
        return fail(error)
    target, error = resolve_target(scenario, args.target)
    if error:
        return fail(error)
    rung = args.rung or default_rung(scenario, _trainable_on(scenario, target))
    if rung not in scenario.rung_names():
        return fail(f"--rung: expected a rung of {scenario.name} ({', '.join(scenario.rung_names())}), got {rung!r}")
    overrides = {
        k: v
        for k, v in (
            ("batch_size", args.batch_size),
            ("warmup_steps", args.warmup_steps),
            ("timed_steps", args.timed_steps),
        )
        if v is not None
    }
    sweep = sweep_scenario(scenario, rung, args.compile, overrides)
    print(
        f"recompute sweep on the options of rung {rung!r}" + (f" with compile: {args.compile}" if args.compile else "")
    )
    out = args.out or default_out(scenario, target.name, "-recompute-sweep")
    check_out_file(out, overwrite=args.overwrite)
    result = runner.run_scenario(
        sweep,
        target,
        out,
        ["vlabench", *sys.argv[1:]],
        rung_timeout_s=args.rung_timeout,
        header_extra={"kind": "recompute-sweep", "sweep_base_rung": rung},
    )
    print()
    print(sweep_table(result))
    print(f"\nresult: {out}")
    return EXIT_OK if all(r["status"] in ("ok", "unsupported") for r in result["rungs"]) else EXIT_FAILED


def _sweep_knobs_error(family, scenario, compile_mode: str | None) -> str | None:
    """Why the family's knobs cannot make this sweep (no recompute groups, a compile mode it lacks), or None."""
    if not family.recompute_groups():
        return f"{scenario.path}: model: expected a family with module groups to recompute, got {family.name} (none)"
    modes = family.compile_modes()
    if compile_mode is None or compile_mode in modes:
        return None
    if not modes:
        return f"--compile: expected no compile mode ({family.name} has no compile option), got {compile_mode!r}"
    return f"--compile: expected one of {family.name}'s compile modes ({', '.join(modes)}), got {compile_mode!r}"


def _trainable_on(scenario, target):
    """Whether the target can train a rung of the scenario (with the target's substitutes), as `run` decides."""
    caps = capabilities(target)
    return lambda rung: (
        unsupported_reason(scenario, target, with_substitutes(scenario, target, rung, caps)[0], caps) is None
    )


def add_recompute_plan_arguments(plan) -> None:
    plan.add_argument("sweep", type=Path, help="a `vlabench recompute-sweep` result")
    plan.add_argument("--budget-gib", type=float, required=True, help="peak memory the rung must fit in")


def cmd_recompute_plan(args) -> int:
    result = load_result(args.sweep)
    if not kinds.is_kind(result, "recompute-sweep"):
        return fail(
            f"{args.sweep}: kind: expected recompute-sweep (a `vlabench recompute-sweep` result), got "
            f"{kinds.stated(result) or 'a ladder'}"
        )
    try:
        plan = plan_recompute(result, args.budget_gib)
    except ValueError as e:
        return fail(f"{args.sweep}: --budget-gib: expected {e}")
    print(sweep_table(result))
    w = result["workload"]
    print(
        f"\nbudget {plan.budget_gib:g} GiB at batch {w['batch_size']}: recompute "
        + (", ".join(plan.groups) if plan.groups else "nothing")
        + f"; predicted peak {plan.peak_gib:.1f} GiB (no recompute: {plan.base_peak_gib:.1f}), "
        f"+{plan.extra_ms:.0f} ms per step over {plan.base_step_ms:.0f} ms"
    )
    print("rung option (the same batch size and compile mode as the sweep):")
    print("  " + yaml.safe_dump(plan.options, default_flow_style=True, width=1000).strip())
    return EXIT_OK
