"""`vlabench ab BASE HEAD SCENARIO`: an A/B of two versions of the code on one machine (harness/judge/ab.py, docs/ab.md):
the options and their checks, the two sides checked out, the pairs run and the verdicts printed."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

from ..arguments import chosen_rungs, fraction, resolve_target
from ..errors import InputError, UsageError
from ..judge.ab import (
    EXIT_UNUSABLE,
    Config,
    Run,
    Verdict,
    alternate,
    bisect_exit,
    checked_out,
    decide,
    document,
    pairs_of,
    pin_cpu,
    resolve_side,
    table,
)
from ..ladder.processes import signals_as_interrupt
from ..outputs import check_new_files, check_out_dir
from ..results import _write_atomic
from ..scenario import load_scenario


def _env(option: str, items: list[str] | None) -> dict[str, str]:
    env = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(option, None, "KEY=VALUE", repr(item))
        env[key] = value
    return env


def config_from_args(args) -> Config:
    scenario = load_scenario(args.scenario)
    target, error = resolve_target(scenario, args.target)
    if error:
        raise UsageError(error)
    rungs = chosen_rungs(scenario, args.rungs) or scenario.rung_names()
    if args.pairs < 2:
        raise InputError("--pairs", None, "at least 2 pairs (one pair gives no interval)", str(args.pairs))
    tolerance, confidence = fraction("--tolerance", args.tolerance), fraction("--confidence", args.confidence)
    if not 0 <= tolerance < 1:
        raise InputError("--tolerance", None, "a tolerance from 0% to below 100%", args.tolerance)
    if not 0.5 < confidence < 1:
        raise InputError("--confidence", None, "a confidence between 50% and 100%", args.confidence)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = (Path(args.out) if args.out else Path("runs") / f"ab-{stamp}").resolve()  # the runs' cwd is their tree
    check_out_dir(out)
    check_new_files(out, ("ab.json",), args.force)  # an earlier A/B's runs are not replaced unasked
    timeout = args.rung_timeout
    path = Path(args.scenario).resolve()
    cpu = pin_cpu() if target.backend == "cpu" and not getattr(args, "no_pin", False) else None
    return Config(path, scenario.name, target.name, rungs, args.pairs, tolerance, confidence, out, timeout, cpu)


def run_ab(args) -> int:
    cfg = config_from_args(args)
    env_a, env_b = _env("--env-a", args.env_a), _env("--env-b", args.env_b)
    sides = [resolve_side("A", args.base, args.repo, env_a), resolve_side("B", args.head, args.repo, env_b)]
    stream = sys.stderr if args.json else sys.stdout  # --json: stdout holds the JSON alone
    argv = getattr(args, "argv", sys.argv[1:])

    def save(runs: list[Run]) -> dict:
        verdicts = [decide(r, pairs_of(runs), cfg.tolerance, cfg.confidence) for r in cfg.rungs]
        doc = document(cfg, sides, runs, verdicts, argv)
        _write_atomic(cfg.out / "ab.json", doc)  # after every run: an interrupted A/B keeps what it measured
        return doc

    with signals_as_interrupt(), checked_out(sides):
        for side in sides:
            print(side.line(), file=stream)
        print(f"{cfg.name} on {cfg.target}, rungs {', '.join(cfg.rungs)}: {cfg.pairs} pairs", file=stream)
        print(pin_line(cfg), file=stream)
        cfg.out.mkdir(parents=True, exist_ok=True)  # only once both sides are checked out: a refusal writes nothing
        runs = alternate(cfg, sides, stream, save)
    doc = save(runs)
    verdicts = [decide(r, pairs_of(runs), cfg.tolerance, cfg.confidence) for r in cfg.rungs]
    return report(doc, verdicts, cfg, args.json)


def pin_line(cfg: Config) -> str:
    if cfg.pin_cpu is None:
        return "not pinned: each run uses its default threads and CPUs"
    return (
        f"pinned: every run of both sides on CPU {cfg.pin_cpu} with one thread (OMP_NUM_THREADS=1); --no-pin "
        "runs with the default threads"
    )


def report(doc: dict, verdicts: list[Verdict], cfg: Config, as_json: bool) -> int:
    if as_json:
        print(json.dumps(doc, indent=1))
    else:
        print()
        print(table(verdicts, cfg.confidence))
        print(f"\n{doc['summary']}")
        print(f"results: {cfg.out}/ (ab.json and each run's result file)")
    return doc["exit_code"]


def add_ab_arguments(p) -> None:
    p.add_argument("base", metavar="BASE", help="side A: a git ref of --repo, or a directory holding a vlabench tree")
    p.add_argument("head", metavar="HEAD", help="side B: a git ref of --repo, or a directory holding a vlabench tree")
    p.add_argument("scenario", metavar="SCENARIO", help="scenario YAML file (both sides run this file)")
    p.add_argument("--repo", help="the git repository of the refs (default: the one holding the current directory)")
    p.add_argument("--rungs", help="comma-separated rung names (default: every rung of the scenario)")
    p.add_argument("--pairs", type=int, default=5, metavar="N", help="A B pairs of processes (default 5)")
    p.add_argument("--target", help="target name; default: auto-detect")
    p.add_argument("--tolerance", default="5%", help="how much slower B may be and pass (default 5%%)")
    p.add_argument("--confidence", default="95%", help="of the interval over the pairs (default 95%%)")
    p.add_argument(
        "--out",
        help="directory for every run's result file and ab.json (default runs/ab-<time>/); one that holds an "
        "ab.json already only with --force",
    )
    p.add_argument("--force", action="store_true", help="replace the A/B (ab.json and its runs) already in --out")
    p.add_argument("--env-a", action="append", metavar="KEY=VALUE", help="extra environment for side A (repeatable)")
    p.add_argument("--env-b", action="append", metavar="KEY=VALUE", help="extra environment for side B (repeatable)")
    p.add_argument("--rung-timeout", type=float, metavar="S", help="record a rung as error after S seconds")
    p.add_argument(
        "--no-pin",
        action="store_true",
        help="a CPU target: run with the default threads and CPUs (default: every run of both sides on one CPU, "
        "one thread)",
    )
    p.add_argument("--json", action="store_true", help="print ab.json's content instead of the table")
    p.add_argument(
        "--bisect",
        action="store_true",
        help="exit codes for `git bisect run`: pass 0, regression 1, inconclusive or unusable 125 (skip)",
    )


def cmd_ab(args) -> int:
    """Exit 0 pass, 1 regression, 2 unusable, 3 inconclusive; with --bisect, 0, 1 or 125."""
    try:
        code = run_ab(args)
    except (InputError, RuntimeError) as exc:
        if not args.bisect:
            raise
        print(f"vlabench: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        code = EXIT_UNUSABLE
    except KeyboardInterrupt:  # 130 also ends a `git bisect run`
        print("\ninterrupted: the worktrees are removed; ab.json keeps the runs that finished", file=sys.stderr)
        return 130
    return bisect_exit(code) if args.bisect else code
