"""What a dataset holds, as two digests: every file's bytes (`sha256`), and the files but the videos (`tables_sha256`:
the parquet tables and the metadata, i.e. the episodes' states, actions and tasks without their rendered frames).

Why: training runs of a ladder's seeds are compared as if they read the same data, and a device machine makes its
demonstrations again in each session (the dataset's path is the same every time). Equal tables with other videos
say the same trajectories were rendered differently; other tables, that the demonstrations themselves differ.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 1 << 20
_CACHE: dict[tuple, dict] = {}


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))


def dataset_fingerprint(root: str | Path) -> dict:
    """{"sha256", "tables_sha256", "files", "bytes"} of the dataset folder at `root` (the files in path order,
    each digested with its path relative to the root); computed once per process for an unchanged folder."""
    root = Path(root)
    files = _files(root)
    key = (str(root.resolve()), tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files))
    if key in _CACHE:
        return _CACHE[key]
    whole, tables, total = hashlib.sha256(), hashlib.sha256(), 0
    for path in files:
        relative = path.relative_to(root).as_posix()
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
        total += path.stat().st_size
        line = f"{relative}\0{digest.hexdigest()}\n".encode()
        whole.update(line)
        if not relative.startswith("videos/"):
            tables.update(line)
    _CACHE[key] = {
        "sha256": whole.hexdigest(),
        "tables_sha256": tables.hexdigest(),
        "files": len(files),
        "bytes": total,
    }
    return _CACHE[key]


def fingerprint_difference(a: dict | None, b: dict | None) -> str | None:
    """How two recorded datasets differ ("their tables", "their videos only"), None where they agree or either
    records no fingerprint."""
    if not a or not b or "sha256" not in a or "sha256" not in b:
        return None
    if a["sha256"] == b["sha256"]:
        return None
    if a.get("tables_sha256") != b.get("tables_sha256"):
        return "their tables (the episodes' states, actions or tasks)"
    return "their videos only (the same trajectories, rendered differently)"
