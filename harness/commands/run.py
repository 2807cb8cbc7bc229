"""`vlabench run`: a scenario's ladder on a target."""

from __future__ import annotations

import datetime
import shlex
import sys
from pathlib import Path

from ..arguments import chosen_rungs, resolve_target
from ..errors import EXIT_FAILED, EXIT_OK, InputError, fail
from ..judge.gates import resolution_note
from ..ladder import runner  # runner.run_scenario, looked up when called: tests stand in for it
from ..ladder.processes import signals_as_interrupt
from ..machine.hardware import TARGETS
from ..outputs import check_out_file, file_name, positive_seconds
from ..report.report import ladder_table
from ..results import commit_argument
from ..scenario import load_scenario, with_dataset

# A result meant for gating holds the spread between processes: pyperf and asv time several processes by default
# for the same reason (docs/gates.md, "The default path").
DEFAULT_REPEATS = 3


def add_run_arguments(run) -> None:
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
        "rungs of the same name, but an ok rung only with an ok re-measure: a failed one is noted in its "
        "failed_attempts); for ladders split over several calls",
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
    _add_process_arguments(run)


def _add_process_arguments(run) -> None:
    """How each rung runs: its repeats, its processes (torchrun) and the commit it records."""
    run.add_argument(
        "--repeats",
        type=int,
        default=DEFAULT_REPEATS,
        metavar="N",
        help=f"run each rung N times (default {DEFAULT_REPEATS}), each in a fresh process, in rounds with the rung "
        "order rotated; every figure is then the median over the repeats with an interval that includes their "
        "spread, which the gate judges with (one run's steps cannot show how far processes differ: --repeats 1 "
        "is quicker, and a gate of two single runs only assumes that spread)",
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
        "--commit",
        metavar="SHA",
        help="the commit this code is, for a copy of the tree without its own .git (or with a stale one): recorded "
        "as an explicit claim (provenance.git_sha_from: --commit) over what the local git says, which is kept as "
        "local_git; VLABENCH_GIT_DIRTY=0|1 says whether it had uncommitted changes",
    )
    run.add_argument(
        "--torchrun-args",
        metavar="ARGS",
        help='extra torchrun flags for multi-node runs, e.g. "--nnodes 2 --node_rank 0 --rdzv_endpoint host:29500"',
    )


def cmd_run(args) -> int:
    positive_seconds("--rung-timeout", args.rung_timeout)
    commit = commit_argument(args.commit) if args.commit is not None else None
    try:
        torchrun_args = shlex.split(args.torchrun_args or "")
    except ValueError as e:  # an unclosed quote
        raise InputError("--torchrun-args", None, "shell words (every quote closed)", str(e)) from None
    scenario = load_scenario(args.scenario)
    if scenario.eval is not None and scenario.train is None:  # an evaluation scenario's ladder is a placeholder
        raise InputError(
            scenario.path,
            "eval",
            "a training scenario for `vlabench run`",
            f"an evaluation scenario (run it with: vlabench eval --scenario {scenario.path})",
        )
    target, error = resolve_target(scenario, args.target)
    if error:
        return fail(error)
    rungs = chosen_rungs(scenario, args.rungs)
    if args.dataset:
        scenario = with_dataset(scenario, args.dataset)
    out = args.out or default_out(scenario, target.name)
    check_out_file(out, merge_flag="--append", merging=args.append, overwrite=args.overwrite)
    if args.nproc < 1:
        return fail(f"--nproc: expected a positive number of processes, got {args.nproc}")
    if args.repeats < 1:
        return fail(f"--repeats: expected a positive number of runs per rung, got {args.repeats}")
    with signals_as_interrupt():  # SIGTERM/SIGHUP end the rung's process group as Ctrl-C does
        result = runner.run_scenario(
            scenario,
            target,
            out,
            ["vlabench", *sys.argv[1:]],
            rung_names=rungs,
            append=args.append,
            rung_timeout_s=args.rung_timeout,
            nproc=args.nproc,
            torchrun_args=torchrun_args,
            floor=args.floor,
            repeats=args.repeats,
            commit=commit,
        )
    print()
    print(ladder_table(result))
    resolution = resolution_note(result)
    if resolution:
        print(resolution)
    print(f"\nresult: {out}")
    print(next_steps(out, target.name, result))
    failed = failed_rungs(result)
    if failed:
        print(f"failed rungs: {', '.join(failed)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def next_steps(out, target: str, result: dict) -> str:
    """What a newcomer can do with the result, and how to read it on a host without an accelerator."""
    lines = []
    if result["target"]["backend"] == "cpu":
        lines.append(
            "note: on a CPU these are functional checks (tiny model, a few steps): the speedups say nothing about a "
            "GPU; run on a GPU target for figures to compare with the published ones"
        )
    lines.append(
        f"next: vlabench show {out} (the table again) | vlabench record {out} (make it the baseline) | "
        f"vlabench gate NEW.json (a later run against it) | vlabench report {out} --out DIR (figures)"
    )
    return "\n".join(lines)


def failed_rungs(result: dict) -> list[str]:
    """Rungs that failed or broke loss parity in this run, including those whose earlier ok record --append kept."""
    run_id = result["provenance"]["run_id"]
    return [
        r["name"]
        for r in result["rungs"]
        if r["status"] in ("error", "oom")
        or (r.get("loss_parity") or {}).get("pass") is False
        or any(a["run_id"] == run_id for a in r.get("failed_attempts", []))
    ]


def default_out(scenario, target: str, kind: str = "") -> Path:
    """runs/<scenario><kind>-<target>-<time>.json; the scenario's name must be a plain name (it comes from a file)."""
    name = file_name(scenario.name, scenario.path, "name")
    return Path("runs") / f"{name}{kind}-{target}-{datetime.datetime.now(datetime.timezone.utc):%Y%m%dT%H%M%SZ}.json"
