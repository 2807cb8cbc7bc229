#!/usr/bin/env python3
"""Where the default path's spread comes from, in a folder of `scripts/gate_aa_tries.py` tries (each try-NN/ holding
the A.json and B.json of `vlabench run --repeats N`):

- within a run: the spread between its processes (sd of the log over the ok repeats) of the rung's whole-run rate,
  of its machine probe's rate and of their quotient, and the correlation of the two logs (medians over the runs):
  would dividing the rate by the probe steady it?
- between runs: the sd over the tries of the log of B's rate over A's (each a median over its repeats), with a
  slowdown injected into B taken out (`--slowdown`, 0.1 for a slow10 series), and the part of it that the runs'
  own spreads cannot explain (the rest is a drift of the machine's level between runs minutes apart, which no run's
  repeats show). docs/gates.md cites what it printed.

    python scripts/tries_spread.py DIR [--slowdown 0.1] [--rung community]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.machine.probe import whole_probe_rate  # noqa: E402
from harness.stats.repeats import ok_repeats  # noqa: E402
from harness.stats.spread import log_spread, whole_rate  # noqa: E402


def rung_of(path: Path, name: str) -> dict:
    return next(r for r in json.loads(path.read_text())["rungs"] if r["name"] == name)


def within(record: dict) -> tuple[float, float, float, float] | None:
    """(rate, probe, rate/probe spreads, correlation of the logs) over one run's ok repeats; None under 3."""
    repeats = ok_repeats(record)
    if len(repeats) < 3:
        return None
    rates = [whole_rate(r["step_times_s"], 1) for r in repeats]  # samples per step cancel in every spread here
    probes = [whole_probe_rate(r["machine_probe"]) for r in repeats]
    corr = statistics.correlation([math.log(x) for x in rates], [math.log(x) for x in probes])
    return log_spread(rates), log_spread(probes), log_spread([a / b for a, b in zip(rates, probes)]), corr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tries", type=Path, help="a folder of gate_aa_tries.py's try-NN/ folders")
    parser.add_argument("--slowdown", type=float, default=0.0, help="the slowdown injected into B (slow10: 0.1)")
    parser.add_argument("--rung", default="community")
    args = parser.parse_args()
    pairs = [
        (rung_of(t / "A.json", args.rung), rung_of(t / "B.json", args.rung)) for t in sorted(args.tries.glob("try-*"))
    ]
    if len(pairs) < 3:
        return print(f"{args.tries}: fewer than 3 tries", file=sys.stderr) or 2
    runs = [w for pair in pairs for rec in pair if (w := within(rec)) is not None]
    med = [statistics.median(w[i] for w in runs) for i in range(4)]
    print(
        f"within a run ({len(runs)} runs): rate {med[0]:.1%}, probe {med[1]:.1%}, rate/probe {med[2]:.1%}, "
        f"correlation {med[3]:+.2f} (medians)"
    )
    drift = [math.log(b["samples_per_s"] / a["samples_per_s"] * (1 + args.slowdown)) for a, b in pairs]
    between = statistics.stdev(drift)
    # what the runs' own spreads give a ratio of two medians of n repeats (a median's sd ~1.25 s / sqrt(n))
    own = statistics.median(
        1.25
        * math.hypot(
            a["process_spread"] / math.sqrt(len(ok_repeats(a))), b["process_spread"] / math.sqrt(len(ok_repeats(b)))
        )
        for a, b in pairs
    )
    level = math.sqrt(max(between**2 - own**2, 0.0))
    print(
        f"between runs ({len(pairs)} tries): B/A spreads {between:.1%} (sd of the log, the slowdown taken out); the "
        f"runs' own spreads explain {own:.1%}; a drift of the level between runs of about {level:.1%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
