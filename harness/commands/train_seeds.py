"""`vlabench train-seeds`: trained rungs judged over training seeds (harness/judge/seeds.py): several train-ladder
results of one ladder, the success gate over their seeds printed (or as JSON), exit 0/1/2/3 as gate."""

from __future__ import annotations

import json
from dataclasses import asdict

from ..arguments import fraction
from ..errors import InputError
from ..judge.gates import EXIT_INCONCLUSIVE, EXIT_PASS, EXIT_REGRESSION, FAIL, INCONCLUSIVE
from ..judge.seeds import NOT_JUDGED, check_repeats, judge_seeds, seeds_table
from ..results import load_result


def add_train_seeds_arguments(p) -> None:
    p.add_argument("results", nargs="+", metavar="RESULT",
                   help="train-ladder.json of the same ladder trained with other seeds (train-ladder --seed N), or "
                   "of train-ladder --seeds N (every seed in one)")  # fmt: skip
    p.add_argument("--success-tolerance", help="how far (absolute) below the reference's rate may pass "
                   "(default: the ladders' train.success_tolerance)")  # fmt: skip
    p.add_argument("--confidence", default="95%", help="of the one-sided t-test (default 95%%)")
    p.add_argument("--json", action="store_true", help="print the checks as JSON")


def cmd_train_seeds(args) -> int:
    ladders = [(path, load_result(path)) for path in args.results]
    warnings = check_repeats(ladders)
    tolerance = (
        fraction("--success-tolerance", args.success_tolerance)
        if args.success_tolerance
        else ladders[0][1]["train_ladder"].get("success_tolerance", 0.05)
    )
    confidence = fraction("--confidence", args.confidence)
    if not 0.5 < confidence < 1:
        raise InputError("--confidence", None, "a confidence between 50% and 100%", args.confidence)
    checks = judge_seeds(ladders, tolerance, confidence)
    if args.json:
        print(json.dumps({"checks": [asdict(c) for c in checks], "warnings": warnings}, indent=1))
    else:
        print(seeds_table(ladders, checks, tolerance))
        for warning in warnings:
            print(f"WARNING: {warning}")
    verdicts = {c.verdict for c in checks}
    undecided = {INCONCLUSIVE, NOT_JUDGED} & verdicts
    return EXIT_REGRESSION if FAIL in verdicts else EXIT_INCONCLUSIVE if undecided else EXIT_PASS
