"""`vlabench site OUT/`: a static results site (plain HTML and PNG files) of the committed results."""

from __future__ import annotations

import time
from pathlib import Path

from ..errors import EXIT_OK
from ..report.site import build_site


def add_site_arguments(site) -> None:
    site.add_argument("out", type=Path, help="directory for the site (a new or empty one, or a previous site)")
    site.add_argument("--repo", default=".", type=Path, help="repository root whose results/ is shown (default: .)")
    site.add_argument(
        "--force", action="store_true", help="write into OUT even when it is a non-empty directory that is no site"
    )


def cmd_site(args) -> int:
    start = time.monotonic()
    written = build_site(args.repo, args.out, force=args.force)
    print(f"site: {args.out / 'index.html'} ({len(written)} files in {time.monotonic() - start:.1f} s)")
    return EXIT_OK
