"""A/A and A/B tries of the speed gate on the path a CI user takes by default: `vlabench run` twice (its default
repeats and threads), then `vlabench gate B --baseline A`, N times; the verdicts tallied.

    python scripts/gate_aa_tries.py --tries 20 --condition quiet --out DIR
    python scripts/gate_aa_tries.py --tries 20 --condition hog --out DIR     # a busy loop on CPU 1 through every B
    python scripts/gate_aa_tries.py --tries 20 --condition slow10 --out DIR  # B's timed steps really 10% longer

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

RUN = ["scenarios/pi05-loongforge.yaml", "--target", "cpu", "--rungs", "community"]
EXIT_VERDICT = {0: "pass", 1: "FAIL", 3: "inconclusive"}


def vlabench(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "harness", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)


def measure(out: Path, env: dict | None = None) -> None:
    done = vlabench("run", *RUN, "--out", str(out), env=env)
    if done.returncode != 0:
        raise SystemExit(f"run {out} failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def one_try(folder: Path, condition: str) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    a, b = folder / "A.json", folder / "B.json"
    measure(a)
    env = {**os.environ, "VLABENCH_TEST_SLOWDOWN": "0.1"} if condition == "slow10" else None
    with cpu_hog(1) if condition == "hog" else contextlib.nullcontext():
        measure(b, env)
    gate = vlabench("gate", str(b), "--baseline", str(a), "--json")
    (folder / "gate.json").write_text(gate.stdout)
    verdict = EXIT_VERDICT.get(gate.returncode, f"exit {gate.returncode}")
    rows = json.loads(gate.stdout).get("checks", []) if gate.stdout.strip().startswith("{") else []
    throughput = next((r for r in rows if r.get("check") == "throughput"), {})
    return {"verdict": verdict, "throughput": throughput}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--condition", choices=("quiet", "hog", "slow10"), default="quiet")
    parser.add_argument("--out", type=Path, required=True, help="a folder for the tries (created)")
    args = parser.parse_args()
    if os.cpu_count() < 2 and args.condition == "hog":
        return print("hog: needs a second CPU for the busy loop", file=sys.stderr) or 2
    tries = []
    for i in range(1, args.tries + 1):
        started = time.time()
        t = {"try": i, **one_try(args.out / f"try-{i:02d}", args.condition)}
        t["load_average"] = os.getloadavg()[0]
        tries.append(t)
        th = t["throughput"]
        print(
            f"try {i}/{args.tries} ({args.condition}): {t['verdict']}, throughput {th.get('verdict')} "
            f"{th.get('change', '')} {th.get('note', '')} ({time.time() - started:.0f} s)",
            flush=True,
        )
    counts = {v: sum(t["verdict"] == v for t in tries) for v in ("pass", "inconclusive", "FAIL")}
    summary = {"condition": args.condition, "tries": args.tries, "counts": counts, "per_try": tries}
    (args.out / "tries.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{args.condition}: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + f" of {args.tries}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
