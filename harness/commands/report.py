"""`vlabench report`: a markdown report with figures of result files."""

from __future__ import annotations

import shlex
from pathlib import Path

from ..errors import EXIT_OK
from ..judge.published import PUBLISHED_DIR, load_published
from ..outputs import check_new_files, check_out_dir
from ..report.report import write_report
from ..results import load_results


def add_report_arguments(rep) -> None:
    rep.add_argument("results", nargs="+", help="result JSON files")
    rep.add_argument(
        "--out", type=Path, required=True, help="directory for report.md and its PNGs (an existing report.md: --force)"
    )
    rep.add_argument("--force", action="store_true", help="replace the report.md (and its PNGs) already in --out")
    rep.add_argument("--published-dir", default=PUBLISHED_DIR, type=Path, help="published-figure YAML directory")
    rep.add_argument("--no-published", action="store_true", help="leave the published figures out")


def cmd_report(args) -> int:
    check_out_dir(args.out)
    check_new_files(args.out, ("report.md",), args.force)
    figures = None if args.no_published else load_published(args.published_dir)
    path = write_report(load_results(args.results), args.out, figures, shlex.join(["vlabench", *args.argv]))
    print(f"report: {path}")
    return EXIT_OK
