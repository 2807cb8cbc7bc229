"""`vlabench compare`: per-hardware comparison tables, with verdicts against published figures."""

from __future__ import annotations

import sys
from pathlib import Path

from .. import kinds
from ..errors import EXIT_OK, fail
from ..judge import compare
from ..judge.compare_training import training_tables
from ..judge.published import PUBLISHED_DIR, load_published
from ..ladder.floor import attach_floors
from ..outputs import check_new_files, check_out_dir
from ..results import load_results, result_files

OUT_FILES = ("comparison.md", "comparison.csv", "verdicts.csv")  # what --out may hold


def add_compare_arguments(comp) -> None:
    comp.add_argument(
        "results",
        nargs="+",
        help="result JSON files or directories (one column per target; a target's folder, e.g. results/h200, "
        "stands for its *.json, a results directory for results/<target>/*.json)",
    )
    comp.add_argument(
        "--per-card",
        action="store_true",
        help="a column group per card (target): samples/s with its 95%% interval, speedup over the card's first "
        "rung, %% of that card's kernel floor, MFU, peak GiB; with --published, each figure's verdict per card",
    )
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
    if args.out:
        check_out_dir(args.out)
        check_new_files(args.out, OUT_FILES, args.force)

    results = attach_floors(load_results(result_files(args.results)))  # a ladder's share of its card's floor
    fmt = "github" if args.format == "markdown" else "simple"
    trained = training_tables(results, fmt)
    for path, result in results:
        if (
            not compare.is_ladder(result)
            and not result.get("success_rate")
            and not kinds.kind_of(result).in_training_tables
        ):
            print(f"{path}: skipped (kind {kinds.stated(result)}: neither a ladder nor success rates)", file=sys.stderr)
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
    print(compare.render(results, figures, fmt, args.per_card))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "comparison.md").write_text(compare.render(results, figures, "github", args.per_card) + "\n")
        (args.out / "comparison.csv").write_text(compare.comparison_csv(results, figures))
        if figures is not None:
            (args.out / "verdicts.csv").write_text(compare.verdicts_csv(results, figures))
        print(f"\nwrote {args.out}/comparison.md, comparison.csv" + (", verdicts.csv" if figures else ""))
    return EXIT_OK
