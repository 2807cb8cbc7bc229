"""`vlabench show`: the tables of result files."""

from __future__ import annotations

import sys

from tabulate import tabulate_formats

from .. import results as result_files  # result_files.load_results, looked up when called: tests stand in for it
from ..errors import EXIT_OK, InputError
from ..ladder.floor import attach_floors
from ..report.report import result_table
from ..stats.provenance_checks import provenance_problems


def add_show_arguments(show) -> None:
    show.add_argument("results", nargs="+", help="result JSON files")
    show.add_argument("--format", default="simple", help="tabulate format (default simple; github for markdown)")


def cmd_show(args) -> int:
    if args.format not in tabulate_formats:
        raise InputError("--format", None, "a tabulate format (" + ", ".join(tabulate_formats) + ")", repr(args.format))
    # any kind: ladder, recompute sweep, eval, profile, ...; a ladder shown beside a floor result of its workload shows its share
    results = result_files.load_results(args.results, any_kind=True)  # a profile too (a kind with a schema of its own)
    for path, result in results:  # shown all the same, with a warning: provenance written by hand after the run
        problems = provenance_problems(result)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            print(
                f"vlabench: warning: {path}: provenance not as the harness wrote it: {problems[0]}{more}",
                file=sys.stderr,
            )
    for _, result in attach_floors(results):
        print(result_table(result, fmt=args.format))
        print()
    return EXIT_OK
