"""Episodes per second of `vlabench eval --ray` against the local pool, on this machine: a Ray cluster of one node
with N CPUs is started here (harness/eval/ray_local.py), then rounds of the same evaluation run once on the local
pool (`--sim-workers N`) and once on the cluster (`--ray ADDRESS --sim-workers N`), the order turned every round so
that neither side always runs first, each a fresh `vlabench eval` process writing its own result. Each run's rate is
its result's episodes over its wall time (the workers' start and the policy's build included, as a user waits for
them); the verdict reads the per-round ratios Ray / local.

    python scripts/eval_ray_vs_local.py --workers 2 --rounds 3 --out runs/ray-vs-local
    python scripts/eval_ray_vs_local.py --workers 16 --tasks 0,1,2,3,4,5,6,7,8,9 --trials 3 --out $OUT/ray-vs-local

DIR/tally.json holds every run's rate and the ratios; DIR/{local,ray}-K.json are the runs' results."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.eval.ray_local import local_cluster  # noqa: E402
from harness.ladder.processes import signals_as_interrupt  # noqa: E402
from harness.results import provenance, write_text_atomic  # noqa: E402


def eval_command(args, out: Path, address: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "harness.cli", "eval", "--suite", args.suite, "--tasks", args.tasks]
    cmd += ["--trials", str(args.trials), "--policy", args.policy, "--sim-workers", str(args.workers)]
    cmd += ["--device", "cpu", "--out", str(out), "--overwrite"]
    return cmd + (["--ray", address] if address else [])


def rate(result: Path) -> tuple[float, int, float]:
    """Episodes per second of a finished run: its episodes over its wall time."""
    throughput = json.loads(result.read_text())["throughput"]
    return throughput["episodes"] / throughput["wall_s"], throughput["episodes"], throughput["wall_s"]


def one_run(args, side: str, k: int, address: str) -> dict:
    out = args.out / f"{side}-{k}.json"
    started = time.monotonic()
    done = subprocess.run(eval_command(args, out, address if side == "ray" else None), cwd=ROOT, text=True,
                          capture_output=True)  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"{side} run {k} exited {done.returncode}: {(done.stderr or done.stdout)[-2000:]}")
    per_s, episodes, wall = rate(out)
    load = os.getloadavg()[0]
    print(f"  {side} {k}: {episodes} episodes in {wall:.1f} s = {per_s:.3f} episodes/s "
          f"(process {time.monotonic() - started:.0f} s, load {load:.1f})", flush=True)  # fmt: skip
    return {"side": side, "round": k, "episodes": episodes, "wall_s": wall, "episodes_per_s": per_s, "load": load}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=os.cpu_count(), help="local workers and the node's CPUs")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--suite", default="libero_spatial")
    p.add_argument("--tasks", default="0,4,9")
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--policy", default="expert")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    # SIGTERM and SIGHUP interrupt as Ctrl-C does, so the cluster's nodes are ended on the way out
    with signals_as_interrupt(), local_cluster([args.workers]) as (address, _):
        print(f"ray: one node of {args.workers} CPUs at {address}; {args.rounds} rounds", flush=True)
        for k in range(1, args.rounds + 1):
            for side in ("local", "ray") if k % 2 else ("ray", "local"):
                runs.append(one_run(args, side, k, address))
    by_round = {(r["side"], r["round"]): r["episodes_per_s"] for r in runs}
    ratios = [by_round["ray", k] / by_round["local", k] for k in range(1, args.rounds + 1)]
    median = {
        side: statistics.median(r["episodes_per_s"] for r in runs if r["side"] == side) for side in ("local", "ray")
    }
    tally = {
        "what": "vlabench eval --ray against the local pool, one machine, rounds in turned order",
        "provenance": provenance(sys.argv),
        "workers": args.workers,
        "cpus_visible": len(os.sched_getaffinity(0)),
        "spec": {"suite": args.suite, "tasks": args.tasks, "trials": args.trials, "policy": args.policy},
        "runs": runs,
        "median_episodes_per_s": median,
        "ray_over_local": ratios,
        "ray_over_local_median": statistics.median(ratios),
    }
    write_text_atomic(args.out / "tally.json", json.dumps(tally, indent=1) + "\n")
    print(f"local {median['local']:.3f}, ray {median['ray']:.3f} episodes/s (medians); Ray / local by round: "
          f"{', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as stop:  # Ctrl-C, SIGTERM or SIGHUP: the cluster is already ended
        sys.exit(f"interrupted ({stop or 'Ctrl-C'}); the runs so far are in --out")
