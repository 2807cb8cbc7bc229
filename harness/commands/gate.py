"""`vlabench gate` (a result against its recorded baseline) and `vlabench record` (promote a result to it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..arguments import fraction
from ..errors import EXIT_OK, InputError
from ..judge.gates import Limits, gate_files, record, recorded_baseline_path
from ..results import load_result


def add_gate_arguments(gate) -> None:
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


def cmd_gate(args) -> int:
    limits = Limits(
        tolerance=fraction("--tolerance", args.tolerance),
        memory_tolerance=fraction("--memory-tolerance", args.memory_tolerance or args.tolerance),
        success_tolerance=fraction("--success-tolerance", args.success_tolerance),
        confidence=fraction("--confidence", args.confidence),
    )
    if not 0.5 < limits.confidence < 1:
        raise InputError("--confidence", None, "a confidence between 50% and 100%", args.confidence)
    baseline = args.baseline or recorded_baseline_path(load_result(args.current), args.results_dir, args.current)
    if not args.baseline and not Path(baseline).exists():  # the first gate of a scenario on this target
        raise InputError(
            str(baseline),
            None,
            "a recorded baseline (record this result as one: vlabench record "
            f"{args.current} --results-dir {args.results_dir}; or name one with --baseline FILE)",
            "none recorded yet",
        )
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


def add_record_arguments(record) -> None:
    record.add_argument("result", help="result JSON")
    record.add_argument("--results-dir", default="results", help="where recorded baselines live (default: results)")
    record.add_argument("--force", action="store_true", help="record even with failed rungs")


def cmd_record(args) -> int:
    dest, kept = record(args.result, args.results_dir, force=args.force)
    print(f"recorded {args.result} as the baseline {dest}" + (f" (the one it replaced kept as {kept})" if kept else ""))
    return EXIT_OK
