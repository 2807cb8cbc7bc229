"""The `vlabench` command line."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shlex
import sys
from pathlib import Path

from models import UnknownFamilyError

from .arguments import fraction, resolve_target
from .errors import InputError
from .machine.hardware import TARGETS
from .outputs import at_least, check_out_dir, check_out_file, positive_seconds

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _fail(msg: str) -> int:
    print(f"vlabench: error: {msg}", file=sys.stderr)
    return EXIT_USAGE


def cmd_run(args) -> int:
    from .ladder.runner import run_scenario
    from .report.report import ladder_table
    from .scenario import load_scenario

    positive_seconds("--rung-timeout", args.rung_timeout)
    scenario = load_scenario(args.scenario)
    if scenario.eval is not None:  # its ladder is a placeholder: `run` would train the full model for nothing
        raise InputError(
            scenario.path,
            "eval",
            "a training scenario for `vlabench run`",
            f"an evaluation scenario (run it with: vlabench eval --scenario {scenario.path})",
        )
    target, error = resolve_target(scenario, args.target)
    if error:
        return _fail(error)
    rungs = None
    if args.rungs:
        rungs = [r.strip() for r in args.rungs.split(",") if r.strip()]
        unknown = [r for r in rungs if r not in scenario.rung_names()]
        if unknown:
            return _fail(
                f"--rungs: expected rung names of {scenario.name} ({', '.join(scenario.rung_names())}), "
                f"got {', '.join(unknown)}"
            )
    if args.dataset:
        scenario = with_dataset(scenario, args.dataset)
    out = args.out or _default_out(scenario.name, target.name)
    check_out_file(out, merge_flag="--append", merging=args.append, overwrite=args.overwrite)
    if args.nproc < 1:
        return _fail(f"--nproc: expected a positive number of processes, got {args.nproc}")
    if args.repeats < 1:
        return _fail(f"--repeats: expected a positive number of runs per rung, got {args.repeats}")
    result = run_scenario(
        scenario,
        target,
        out,
        ["vlabench", *sys.argv[1:]],
        rung_names=rungs,
        append=args.append,
        rung_timeout_s=args.rung_timeout,
        nproc=args.nproc,
        torchrun_args=shlex.split(args.torchrun_args or ""),
        floor=args.floor,
        repeats=args.repeats,
    )
    print()
    print(ladder_table(result))
    print(f"\nresult: {out}")
    failed = [
        r["name"]
        for r in result["rungs"]
        if r["status"] in ("error", "oom") or (r.get("loss_parity") or {}).get("pass") is False
    ]
    if failed:
        print(f"failed rungs: {', '.join(failed)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def with_dataset(scenario, path: str):
    """The scenario with every target's workload reading the dataset at `path`."""
    from .data.pipeline import DataSpec, reading

    # a dataset named on the command line is never made: a mistyped path stays an error
    targets = {
        name: {**o, "data": reading(o["data"], path)} if isinstance(o.get("data"), DataSpec) else o
        for name, o in scenario.targets.items()
    }
    workload = dataclasses.replace(scenario.workload, data=reading(scenario.workload.data, path))
    return dataclasses.replace(scenario, workload=workload, targets=targets)


def cmd_recompute_sweep(args) -> int:
    from models import get_family

    from .ladder.runner import run_scenario
    from .ladder.sweep import default_rung, sweep_scenario, sweep_table
    from .scenario import load_scenario

    positive_seconds("--rung-timeout", args.rung_timeout)
    at_least("--batch-size", args.batch_size, 1, "a positive batch size")
    at_least("--warmup-steps", args.warmup_steps, 0, "a non-negative number of steps")
    at_least("--timed-steps", args.timed_steps, 1, "a positive number of steps")
    scenario = load_scenario(args.scenario)
    if args.dataset:
        scenario = with_dataset(scenario, args.dataset)
    error = _sweep_knobs_error(get_family(scenario.model), scenario, args.compile)
    if error:
        return _fail(error)
    target, error = resolve_target(scenario, args.target)
    if error:
        return _fail(error)
    rung = args.rung or default_rung(scenario, _trainable_on(scenario, target))
    if rung not in scenario.rung_names():
        return _fail(f"--rung: expected a rung of {scenario.name} ({', '.join(scenario.rung_names())}), got {rung!r}")
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
    out = args.out or _default_out(sweep.name, target.name)
    check_out_file(out, overwrite=args.overwrite)
    result = run_scenario(
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
    from .ladder.runner import unsupported_reason, with_substitutes
    from .machine.hardware import capabilities

    caps = capabilities(target)
    return lambda rung: (
        unsupported_reason(scenario, target, with_substitutes(scenario, target, rung, caps)[0], caps) is None
    )


def cmd_recompute_plan(args) -> int:
    import yaml

    from .ladder.sweep import plan_recompute, sweep_table
    from .results import load_result

    result = load_result(args.sweep)
    if result.get("kind") != "recompute-sweep":
        return _fail(
            f"{args.sweep}: kind: expected recompute-sweep (a `vlabench recompute-sweep` result), got "
            f"{result.get('kind') or 'a ladder'}"
        )
    try:
        plan = plan_recompute(result, args.budget_gib)
    except ValueError as e:
        return _fail(f"{args.sweep}: --budget-gib: expected {e}")
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


def cmd_floor(args) -> int:
    from .ladder.runner import measure_floor_process
    from .machine.hardware import capabilities, get_device
    from .report.report import floor_table
    from .results import ResultWriter, provenance
    from .scenario import load_scenario
    from .spec import scenario_spec

    # --rung-timeout, as on run and recompute-sweep; --timeout is its earlier name, still accepted (hidden)
    timeout_flag, timeout = (
        ("--timeout", args.timeout) if args.timeout is not None else ("--rung-timeout", args.rung_timeout)
    )
    positive_seconds(timeout_flag, timeout)
    scenario = load_scenario(args.scenario)
    target, error = resolve_target(scenario, args.target)
    if error:
        return _fail(error)
    out = args.out or _default_out(f"{scenario.name}-floor", target.name)
    check_out_file(out, overwrite=args.overwrite)
    spec = dataclasses.replace(scenario_spec(scenario, target), fp8="fp8" in capabilities(target))
    device = get_device(target.backend, target_name=target.name)
    floor = measure_floor_process(spec, print, timeout)
    header = {
        "kind": "floor",
        "scenario": {"name": scenario.name, "path": scenario.path, "sha256": scenario.sha256},
        "target": {
            "name": target.name,
            "backend": target.backend,
            "device_name": device.device_name(),
            "device_count": device.device_count(),
            "listed_in_scenario": scenario.lists_target(target.name),
        },
        "provenance": provenance(["vlabench", *args.argv]),
        "workload": spec.workload_record(),
        "rungs": [],
        "floor": floor,
    }
    result = ResultWriter(out, header).data
    if "error" in floor:
        return _fail(f"{floor['error']}: " + " | ".join(floor.get("output_tail", [])[-2:]))
    print(floor_table(result))
    print(f"\nresult: {out}")
    return EXIT_OK


def cmd_profile(args) -> int:
    import json as json_

    from .ladder.profile import profile_rung, profile_table
    from .ladder.runner import unsupported_reason, with_substitutes
    from .machine.hardware import capabilities
    from .scenario import load_scenario
    from .spec import scenario_spec

    at_least("--steps", args.steps, 1, "a positive number of steps")
    at_least("--batch-size", args.batch_size, 1, "a positive batch size")
    if args.out:
        check_out_file(args.out, overwrite=args.overwrite)
    scenario = load_scenario(args.scenario)
    if args.dataset:
        scenario = with_dataset(scenario, args.dataset)
    target, error = resolve_target(scenario, args.target)
    if error:
        return _fail(error)
    rungs = {r.name: r for r in scenario.ladder}
    if args.rung not in rungs:
        return _fail(f"--rung: expected a rung of {scenario.name} ({', '.join(rungs)}), got {args.rung!r}")
    caps = capabilities(target)
    rung, _ = with_substitutes(scenario, target, rungs[args.rung], caps)
    reason = unsupported_reason(scenario, target, rung, caps)
    if reason:
        return _fail(f"{args.rung}: unsupported on {target.name}: {reason}")
    spec = scenario_spec(scenario, target, rung, batch_size=args.batch_size)
    if args.synthetic:  # the compute alone: batches made up front on the device
        spec = dataclasses.replace(spec, loader={**spec.loader, "kind": "synthetic"})
    result = profile_rung(spec, steps=args.steps)
    batch_size = spec.workload.batch_size
    print(profile_table(f"{scenario.name}/{args.rung} on {target.name}, batch {batch_size}", result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json_.dumps(
                {
                    "scenario": scenario.name,
                    "rung": args.rung,
                    "target": target.name,
                    "batch_size": batch_size,
                    **result,
                },
                indent=1,
            )
        )
    return EXIT_OK


def _default_out(name: str, target: str) -> Path:
    return Path("runs") / f"{name}-{target}-{datetime.datetime.now(datetime.timezone.utc):%Y%m%dT%H%M%SZ}.json"


def cmd_show(args) -> int:
    from tabulate import tabulate_formats

    from .ladder.floor import attach_floors
    from .report.report import result_table
    from .results import load_result

    if args.format not in tabulate_formats:
        raise InputError("--format", None, "a tabulate format (" + ", ".join(tabulate_formats) + ")", repr(args.format))
    # ladder, recompute sweep or eval; a ladder shown beside a floor result of its workload shows its share
    for _, result in attach_floors([(str(p), load_result(p)) for p in args.results]):
        print(result_table(result, fmt=args.format))
        print()
    return EXIT_OK


def cmd_readme(args) -> int:
    from .report.readme import update_readme

    changed = update_readme(Path(args.repo), check=args.check)
    if args.check and changed:
        print(f"stale: {', '.join(map(str, changed))}: run `vlabench readme`", file=sys.stderr)
        return EXIT_FAILED
    print(f"updated: {', '.join(map(str, changed))}" if changed else "the generated pages are current")
    return EXIT_OK


def cmd_gate(args) -> int:
    from .judge.gates import Limits, gate_files, recorded_baseline_path
    from .results import load_result

    limits = Limits(
        tolerance=fraction("--tolerance", args.tolerance),
        memory_tolerance=fraction("--memory-tolerance", args.memory_tolerance or args.tolerance),
        success_tolerance=fraction("--success-tolerance", args.success_tolerance),
        confidence=fraction("--confidence", args.confidence),
    )
    if not 0.5 < limits.confidence < 1:
        raise InputError("--confidence", None, "a confidence between 50% and 100%", args.confidence)
    baseline = args.baseline or recorded_baseline_path(load_result(args.current), args.results_dir)
    rungs = [r.strip() for r in args.rungs.split(",") if r.strip()] if args.rungs else None
    report = gate_files(args.current, baseline, limits, rungs)
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    elif args.markdown:
        print(report.markdown())
    else:
        print(report.text())
    for warning in report.warnings if (args.json or args.markdown) else ():
        print(f"WARNING: {warning}", file=sys.stderr)  # visible in CI logs whatever the format
    return report.exit_code


def cmd_record(args) -> int:
    from .judge.gates import record_baseline

    dest = record_baseline(args.result, args.results_dir, force=args.force)
    print(f"recorded {args.result} as the baseline {dest}")
    return EXIT_OK


def _load_results(paths) -> list:
    from .results import load_result

    return [(str(p), load_result(p)) for p in paths]


def cmd_compare(args) -> int:
    from .judge import compare
    from .judge.published import load_published

    if args.out:
        check_out_dir(args.out)
    results = _load_results(args.results)
    for path, result in results:
        if not compare.is_ladder(result) and not result.get("success_rate"):
            print(f"{path}: skipped (kind {result.get('kind')}: neither a ladder nor success rates)", file=sys.stderr)
    if not compare.columns(results) and not (args.published and any(r.get("success_rate") for _, r in results)):
        return _fail("expected at least one ladder result (or, with --published, one with success rates)")
    figures = load_published(args.published_dir) if args.published else None
    print(compare.render(results, figures, "github" if args.format == "markdown" else "simple"))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "comparison.md").write_text(compare.render(results, figures, "github") + "\n")
        (args.out / "comparison.csv").write_text(compare.comparison_csv(results, figures))
        if figures is not None:
            (args.out / "verdicts.csv").write_text(compare.verdicts_csv(results, figures))
        print(f"\nwrote {args.out}/comparison.md, comparison.csv" + (", verdicts.csv" if figures else ""))
    return EXIT_OK


def cmd_report(args) -> int:
    from .judge.published import load_published
    from .report.report import write_report

    check_out_dir(args.out)
    figures = None if args.no_published else load_published(args.published_dir)
    path = write_report(_load_results(args.results), args.out, figures, shlex.join(["vlabench", *args.argv]))
    print(f"report: {path}")
    return EXIT_OK


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vlabench")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vlabench", description="Reproduce published VLA training speedups.")
    parser.add_argument("--version", action="version", version=f"vlabench {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_run, _add_recompute, _add_floor_and_profile, _add_result_commands, _add_module_commands):
        add(sub)
    return parser


def _add_run(sub) -> None:
    run = sub.add_parser("run", help="run a scenario's ladder on a target")
    run.add_argument("scenario", help="scenario YAML file")
    run.add_argument("--target", help=f"target name ({', '.join(TARGETS)}); default: auto-detect")
    run.add_argument("--rungs", help="comma-separated rung names to run (default: all)")
    run.add_argument("--out", type=Path, help="result JSON path (default: runs/<scenario>-<target>-<time>.json)")
    run.add_argument(
        "--floor",
        action="store_true",
        help="first measure the workload's kernel floor (every GEMM and attention call at the vendor library's "
        "speed) and show each rung's share of it",
    )
    run.add_argument(
        "--dataset",
        metavar="PATH",
        help="read batches from this LeRobotDataset v3.0 folder (the workload's data.dataset)",
    )
    run.add_argument(
        "--append",
        action="store_true",
        help="merge into an existing --out of the same scenario and target (rungs run now replace "
        "rungs of the same name); for ladders split over several calls",
    )
    run.add_argument(
        "--overwrite", action="store_true", help="replace an existing --out (without it: refuse, or --append to merge)"
    )
    run.add_argument(
        "--rung-timeout",
        type=float,
        default=None,
        metavar="S",
        help="record a rung as error if it runs longer than S seconds",
    )
    run.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="N",
        help="run each rung N times, each in a fresh process, in rounds with the rung order rotated; every "
        "figure is then the median over the repeats with an interval that includes their spread",
    )
    run.add_argument(
        "--nproc",
        type=int,
        default=1,
        metavar="N",
        help="processes per rung through torchrun, data-parallel with DDP (NCCL on GPUs, gloo "
        "on CPUs); the workload's batch_size is per process",
    )
    run.add_argument(
        "--torchrun-args",
        metavar="ARGS",
        help='extra torchrun flags for multi-node runs, e.g. "--nnodes 2 --node_rank 0 --rdzv_endpoint host:29500"',
    )
    run.set_defaults(func=cmd_run)


def _add_recompute(sub) -> None:
    sweep = sub.add_parser("recompute-sweep", help="cost of recomputing each module group: ms per GiB saved")
    sweep.add_argument("scenario", help="scenario YAML file")
    sweep.add_argument("--target", help="target name; default: auto-detect")
    sweep.add_argument("--rung", help="rung whose options are the base (default: the first pattern-recompute rung)")
    sweep.add_argument(
        "--compile",
        metavar="MODE",
        help="override the base's compile mode, one of the model family's (none avoids a compile per configuration)",
    )
    sweep.add_argument("--dataset", metavar="PATH", help="read batches from this dataset (as vlabench run)")
    sweep.add_argument("--batch-size", type=int)
    sweep.add_argument("--warmup-steps", type=int)
    sweep.add_argument("--timed-steps", type=int)
    sweep.add_argument("--out", type=Path, help="result JSON path")
    sweep.add_argument("--rung-timeout", type=float, default=None, metavar="S")
    sweep.add_argument("--overwrite", action="store_true", help="replace an existing --out (without it: refuse)")
    sweep.set_defaults(func=cmd_recompute_sweep)

    plan = sub.add_parser(
        "recompute-plan", help="the cheapest module groups to recompute under a memory budget, from a sweep"
    )
    plan.add_argument("sweep", type=Path, help="a `vlabench recompute-sweep` result")
    plan.add_argument("--budget-gib", type=float, required=True, help="peak memory the rung must fit in")
    plan.set_defaults(func=cmd_recompute_plan)


def _add_floor_and_profile(sub) -> None:
    floor = sub.add_parser(
        "floor",
        help="the workload's kernel floor: every GEMM and attention call at the vendor "
        "library's speed, summed into samples/s (bf16 and FP8)",
    )
    floor.add_argument("scenario", help="scenario YAML file")
    floor.add_argument("--target", help="target name; default: auto-detect")
    floor.add_argument("--out", type=Path, help="result JSON path")
    floor.add_argument(
        "--rung-timeout",
        type=float,
        default=None,
        metavar="S",
        help="end the measurement's process group after S seconds",
    )
    floor.add_argument("--timeout", type=float, help=argparse.SUPPRESS)  # the earlier name of --rung-timeout
    floor.add_argument("--overwrite", action="store_true", help="replace an existing --out (without it: refuse)")
    floor.set_defaults(func=cmd_floor)

    prof = sub.add_parser("profile", help="where one rung's step goes: kernels, launch gaps, data wait")
    prof.add_argument("scenario", help="scenario YAML file")
    prof.add_argument("--rung", required=True, help="the rung to profile")
    prof.add_argument("--target", help="target name; default: auto-detect")
    prof.add_argument("--dataset", metavar="PATH", help="read batches from this dataset (as vlabench run)")
    prof.add_argument(
        "--batch-size", type=int, help="override the workload's batch size (e.g. to see launch-bound steps)"
    )
    prof.add_argument("--steps", type=int, default=5, help="profiled steps (default 5)")
    prof.add_argument("--synthetic", action="store_true", help="the compute alone: synthetic batches on the device")
    prof.add_argument("--out", type=Path, help="also write the profile as JSON")
    prof.add_argument("--overwrite", action="store_true", help="replace an existing --out (without it: refuse)")
    prof.set_defaults(func=cmd_profile)


def _add_result_commands(sub) -> None:
    """show, gate, record, compare, report."""
    from .judge.published import PUBLISHED_DIR

    show = sub.add_parser("show", help="print the ladder table of result files")
    show.add_argument("results", nargs="+", help="result JSON files")
    show.add_argument("--format", default="simple", help="tabulate format (default simple; github for markdown)")
    show.set_defaults(func=cmd_show)

    gate = sub.add_parser(
        "gate",
        help="regression gate: a result against a recorded baseline (exit 0 pass, 1 regression, 2 unusable "
        "input, 3 inconclusive: the evidence cannot tell, or a slower machine explains it)",
    )
    gate.add_argument("current", help="result JSON to check")
    gate.add_argument("--baseline", help="recorded result JSON (default: results/<target>/<scenario>.json)")
    gate.add_argument("--tolerance", default="5%", help="throughput: how much slower may pass (default 5%%)")
    gate.add_argument("--memory-tolerance", help="peak memory: how much larger may pass (default: --tolerance)")
    gate.add_argument(
        "--success-tolerance",
        default="5%",
        help="success rate: how far (absolute) below the recorded rate may pass (default 5%%)",
    )
    gate.add_argument("--confidence", default="95%", help="of the noise interval and the Wilson bound (default 95%%)")
    gate.add_argument("--rungs", help="comma-separated rung names to gate (default: all)")
    gate.add_argument("--results-dir", default="results", help="where recorded baselines live (default: results)")
    fmt = gate.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    fmt.add_argument("--markdown", action="store_true", help="print markdown (for CI job summaries)")
    gate.set_defaults(func=cmd_gate)

    record = sub.add_parser("record", help="promote a result to the recorded baseline of its scenario and target")
    record.add_argument("result", help="result JSON")
    record.add_argument("--results-dir", default="results", help="where recorded baselines live (default: results)")
    record.add_argument("--force", action="store_true", help="record even with failed rungs")
    record.set_defaults(func=cmd_record)

    comp = sub.add_parser("compare", help="per-hardware comparison tables, with verdicts against published figures")
    comp.add_argument("results", nargs="+", help="result JSON files (one column per target)")
    comp.add_argument("--published", action="store_true", help="set the published figures beside ours, with verdicts")
    comp.add_argument("--published-dir", default=PUBLISHED_DIR, type=Path, help="published-figure YAML directory")
    comp.add_argument("--format", choices=("text", "markdown"), default="text", help="printed table format")
    comp.add_argument("--out", type=Path, help="also write comparison.md, comparison.csv (and verdicts.csv) here")
    comp.set_defaults(func=cmd_compare)

    rep = sub.add_parser("report", help="markdown report with figures (matplotlib) of result files")
    rep.add_argument("results", nargs="+", help="result JSON files")
    rep.add_argument("--out", type=Path, required=True, help="directory for report.md and its PNGs")
    rep.add_argument("--published-dir", default=PUBLISHED_DIR, type=Path, help="published-figure YAML directory")
    rep.add_argument("--no-published", action="store_true", help="leave the published figures out")
    rep.set_defaults(func=cmd_report)


def _add_module_commands(sub) -> None:
    """Commands whose arguments live beside their logic, and readme."""
    from .judge.gate_power import add_gate_power_arguments, cmd_gate_power

    power = sub.add_parser(
        "gate-power", help="how the speed gate decides on the committed results: injected changes, same-code repeats"
    )
    add_gate_power_arguments(power)
    power.set_defaults(func=cmd_gate_power)

    from .eval.main import add_eval_arguments, cmd_eval

    ev = sub.add_parser("eval", help="LIBERO closed-loop evaluation (openpi protocol) with parallel env workers")
    add_eval_arguments(ev)
    ev.set_defaults(func=cmd_eval)

    from .train.cli import add_train_arguments, add_train_check_arguments, cmd_train, cmd_train_check

    tr = sub.add_parser("train", help="train one rung of a scenario on a dataset to a checkpoint (openpi's recipe)")
    add_train_arguments(tr)
    tr.set_defaults(func=cmd_train)
    tc = sub.add_parser("train-check", help="convergence: each run's smoothed final loss against a reference run's")
    add_train_check_arguments(tc)
    tc.set_defaults(func=cmd_train_check)

    from .train.ladder_cli import add_train_ladder_arguments, cmd_train_ladder

    tl = sub.add_parser(
        "train-ladder", help="train -> evaluate -> gate: each rung of a scenario's train: block trained, evaluated "
        "in LIBERO and judged against the reference rung"
    )  # fmt: skip
    add_train_ladder_arguments(tl)
    tl.set_defaults(func=cmd_train_ladder)

    from .judge.ab import add_ab_arguments, cmd_ab

    ab = sub.add_parser("ab", help="A/B of two versions of the code on this machine (exit 0/1/2/3, as gate)")
    add_ab_arguments(ab)
    ab.set_defaults(func=cmd_ab)

    from .data.cli import add_make_dataset_arguments, cmd_make_dataset

    mk = sub.add_parser("make-dataset", help="write a LeRobotDataset v3.0 folder (synthetic episodes)")
    add_make_dataset_arguments(mk)
    mk.set_defaults(func=cmd_make_dataset)

    readme = sub.add_parser(
        "readme", help="regenerate docs/results.md, the README's headline and the figure from results/"
    )
    readme.add_argument("--repo", default=".", help="repository root (default: .)")
    readme.add_argument(
        "--check", action="store_true", help="exit 1 if README.md or docs/results.md is stale, change nothing"
    )
    readme.set_defaults(func=cmd_readme)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv  # the command as given, for provenance lines
    try:
        return args.func(args)
    except (InputError, RuntimeError, UnknownFamilyError) as exc:  # user errors: one line, no traceback
        return _fail(str(exc).splitlines()[0])
    except KeyboardInterrupt:
        print("\ninterrupted: finished rungs are kept in the result file", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
