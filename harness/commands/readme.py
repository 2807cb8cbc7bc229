"""`vlabench readme`: regenerate (or, with --check, check) the generated pages from results/."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import EXIT_FAILED, EXIT_OK
from ..report.readme import update_readme


def add_readme_arguments(readme) -> None:
    readme.add_argument("--repo", default=".", help="repository root (default: .)")
    readme.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if README.md, docs/results.md, docs/gates.md, docs/hardware.md or the figure is stale; "
        "change nothing",
    )


def cmd_readme(args) -> int:
    changed = update_readme(Path(args.repo), check=args.check)
    if args.check and changed:
        print(f"stale: {', '.join(map(str, changed))}: run `vlabench readme`", file=sys.stderr)
        return EXIT_FAILED
    print(f"updated: {', '.join(map(str, changed))}" if changed else "the generated pages are current")
    return EXIT_OK
