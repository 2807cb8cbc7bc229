"""`vlabench show`: the tables of result files."""

from __future__ import annotations

from ..errors import EXIT_OK, InputError


def add_show_arguments(show) -> None:
    show.add_argument("results", nargs="+", help="result JSON files")
    show.add_argument("--format", default="simple", help="tabulate format (default simple; github for markdown)")


def cmd_show(args) -> int:
    from tabulate import tabulate_formats

    from ..ladder.floor import attach_floors
    from ..results import load_results
    from .report import result_table

    if args.format not in tabulate_formats:
        raise InputError("--format", None, "a tabulate format (" + ", ".join(tabulate_formats) + ")", repr(args.format))
    # ladder, recompute sweep or eval; a ladder shown beside a floor result of its workload shows its share
    for _, result in attach_floors(load_results(args.results)):
        print(result_table(result, fmt=args.format))
        print()
    return EXIT_OK
