"""A/A and A/B tries of the speed gate on the path a CI user takes by default: `vlabench run` twice (its default
repeats and threads), then `vlabench gate B --baseline A`, N times; the verdicts tallied.

    python scripts/gate_aa_tries.py --tries 20 --condition quiet --out DIR
    python scripts/gate_aa_tries.py --tries 20 --condition hog --out DIR     # a busy loop on CPU 1 through every B
    python scripts/gate_aa_tries.py --tries 20 --condition slow10 --out DIR  # B's timed steps really 10% longer
    python scripts/gate_aa_tries.py --tries 10 --condition slow10 --repeats 8 --out DIR  # 8 repeats a run
    python scripts/gate_aa_tries.py --regate --out DIR  # the same runs judged again by the gate as it is now

`slow10` sets the test-only VLABENCH_TEST_SLOWDOWN=0.1 for B (a busy wait inside each timed step, harness/ladder/
rung.py): a real 10% regression the gate must FAIL. Each try's A and B results, the gate's JSON verdicts and a
summary (tries.json) are written under DIR; docs/gates.md cites the summaries it shows.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from machine_load import cpu_hog  # noqa: E402

SCENARIO = "scenarios/pi05-loongforge.yaml"  # the README's first command runs its CPU smoke
RUN = ["--target", "cpu", "--rungs", "community"]
EXIT_VERDICT = {0: "pass", 1: "FAIL", 3: "inconclusive"}


PIN = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def vlabench(*args: str, env: dict | None = None, pin: bool = False) -> subprocess.CompletedProcess:
    """`vlabench ARGS`; with `pin`, the whole run (its rung processes too) on CPU 0 with one thread, as `vlabench ab`
    pins a CPU target's runs."""
    cmd = [*(["taskset", "-c", "0"] if pin else []), sys.executable, "-m", "harness", *args]
    env = {**(env or os.environ), **(PIN if pin else {})}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)


def measure(out: Path, scenario: str, env: dict | None = None, pin: bool = False, repeats: int | None = None) -> str:
    """One `vlabench run` to `out`; returns the line in which it says what a gate of it can resolve."""
    more = ["--repeats", str(repeats)] if repeats else []
    done = vlabench("run", scenario, *RUN, *more, "--out", str(out), env=env, pin=pin)
    if done.returncode != 0:
        raise SystemExit(f"run {out} failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return next((line for line in done.stdout.splitlines() if line.startswith("gate resolution:")), "")


def judge(folder: Path) -> dict:
    """`vlabench gate B --baseline A` of one try's folder, with its JSON kept there."""
    gate = vlabench("gate", str(folder / "B.json"), "--baseline", str(folder / "A.json"), "--json")
    (folder / "gate.json").write_text(gate.stdout)
    verdict = EXIT_VERDICT.get(gate.returncode, f"exit {gate.returncode}")
    rows = json.loads(gate.stdout).get("checks", []) if gate.stdout.strip().startswith("{") else []
    return {"verdict": verdict, "throughput": next((r for r in rows if r.get("check") == "throughput"), {})}


def regate(out: Path) -> int:
    """Judge a finished series' tries again with the gate as it is now (the runs are kept; only the verdicts are
    new), and rewrite its tries.json."""
    summary = json.loads((out / "tries.json").read_text())
    for t in summary["per_try"]:
        t.update(judge(out / f"try-{t['try']:02d}"))
    summary["counts"] = {
        v: sum(t["verdict"] == v for t in summary["per_try"]) for v in ("pass", "inconclusive", "FAIL")
    }
    summary["regated"] = True
    (out / "tries.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{summary['condition']} (judged again): " + ", ".join(f"{n} {v}" for v, n in summary["counts"].items()))
    return 0


def one_try(folder: Path, condition: str, pin: bool, scenario: str, repeats: int | None = None) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    a, b = folder / "A.json", folder / "B.json"
    resolution = {"A": measure(a, scenario, pin=pin, repeats=repeats)}
    env = {**os.environ, "VLABENCH_TEST_SLOWDOWN": "0.1"} if condition == "slow10" else None
    with cpu_hog(1) if condition == "hog" else contextlib.nullcontext():
        resolution["B"] = measure(b, scenario, env, pin=pin, repeats=repeats)
    reached = {side: json.loads(f.read_text()).get("repeats", 1) for side, f in (("A", a), ("B", b))}
    return {**judge(folder), "resolution": resolution, "repeats": reached}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--condition", choices=("quiet", "hog", "slow10"), default="quiet")
    parser.add_argument("--out", type=Path, required=True, help="a folder for the tries (created)")
    parser.add_argument("--scenario", default=SCENARIO, help=f"whose community rung runs (default {SCENARIO})")
    parser.add_argument(
        "--pin", action="store_true", help="both runs on CPU 0 with one thread (taskset, OMP_NUM_THREADS=1)"
    )
    parser.add_argument("--repeats", type=int, help="each run's repeats (default: `vlabench run`'s own default)")
    parser.add_argument("--regate", action="store_true", help="judge the tries under --out again, running nothing")
    args = parser.parse_args()
    if args.regate:
        return regate(args.out)
    if os.cpu_count() < 2 and args.condition == "hog":
        return print("hog: needs a second CPU for the busy loop", file=sys.stderr) or 2
    tries = []
    for i in range(1, args.tries + 1):
        started = time.time()
        t = {"try": i, **one_try(args.out / f"try-{i:02d}", args.condition, args.pin, args.scenario, args.repeats)}
        t["load_average"] = os.getloadavg()[0]
        tries.append(t)
        th = t["throughput"]
        print(
            f"try {i}/{args.tries} ({args.condition}): {t['verdict']}, throughput {th.get('verdict')} "
            f"{th.get('change', '')} {th.get('note', '')} ({time.time() - started:.0f} s)",
            flush=True,
        )
    counts = {v: sum(t["verdict"] == v for t in tries) for v in ("pass", "inconclusive", "FAIL")}
    summary = {
        "condition": args.condition,
        "scenario": args.scenario,
        "pinned": args.pin,
        "repeats": args.repeats,
        "tries": args.tries,
        "counts": counts,
        "per_try": tries,
    }
    (args.out / "tries.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{args.condition}: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + f" of {args.tries}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
