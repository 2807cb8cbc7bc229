"""`vlabench compare`: per-hardware comparison tables, with verdicts against published figures."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import EXIT_OK, fail
from ..outputs import check_new_files, check_out_dir
from ..results import load_results
from .published import PUBLISHED_DIR

OUT_FILES = ("comparison.md", "comparison.csv", "verdicts.csv")  # what --out may hold


def add_compare_arguments(comp) -> None:
    comp.add_argument("results", nargs="+", help="result JSON files (one column per target)")
    comp.add_argument("--published", action="store_true", help="set the published figures beside ours, with verdicts")
    comp.add_argument("--published-dir", default=PUBLISHED_DIR, type=Path, help="published-figure YAML directory")
    comp.add_argument("--format", choices=("text", "markdown"), default="text", help="printed table format")
    comp.add_argument(
        "--out",
        type=Path,
        help="also write comparison.md, comparison.csv (and verdicts.csv) here; existing ones only with --force",
    )
    comp.add_argument("--force", action="store_true", help="replace the comparison files already in --out")


def cmd_compare(args) -> int:
    from . import compare
    from .published import load_published

    if args.out:
        check_out_dir(args.out)
        check_new_files(args.out, OUT_FILES, args.force)
    from .compare_training import training_tables

    results = load_results(args.results)
    fmt = "github" if args.format == "markdown" else "simple"
    trained = training_tables(results, fmt)
    for path, result in results:
        if not compare.is_ladder(result) and not result.get("success_rate") and result.get("kind") != "train-ladder":
            print(f"{path}: skipped (kind {result.get('kind')}: neither a ladder nor success rates)", file=sys.stderr)
    if trained:
        print(trained + "\n")
        if not compare.columns(results):
            if args.out:
                args.out.mkdir(parents=True, exist_ok=True)
                (args.out / "comparison.md").write_text(training_tables(results, "github") + "\n")
                print(f"wrote {args.out}/comparison.md")
            return EXIT_OK
    if not compare.columns(results) and not (args.published and any(r.get("success_rate") for _, r in results)):
        return fail("expected at least one ladder result (or, with --published, one with success rates)")
    figures = load_published(args.published_dir) if args.published else None
    print(compare.render(results, figures, "github" if args.format == "markdown" else "simple"))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "comparison.md").write_text(compare.render(results, figures, "github") + "\n")
        (args.out / "comparison.csv").write_text(compare.comparison_csv(results, figures))
        if figures is not None:
            (args.out / "verdicts.csv").write_text(compare.verdicts_csv(results, figures))
        print(f"\nwrote {args.out}/comparison.md, comparison.csv" + (", verdicts.csv" if figures else ""))
    return EXIT_OK
