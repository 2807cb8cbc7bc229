"""What a dataset holds, as two digests: its files (`sha256`), and its files but the videos (`tables_sha256`: the
parquet tables and the metadata, i.e. the episodes' states, actions and tasks without their rendered frames).

Why: training runs of a ladder's seeds are compared as if they read the same data, and a device machine makes its
demonstrations again in each session (the dataset's path is the same every time). Equal tables with other videos
say the same trajectories were rendered differently; other tables, that the demonstrations themselves differ.

Every file is digested whole, except videos past WHOLE_VIDEO_BYTES in all (a real dataset's videos can be hundreds
of GB, read by every rung process): then each video is digested by its size and its first and last END_BYTES, and
the fingerprint says so (`videos`). Tables are always digested whole: they are a small part of a dataset.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 1 << 20
WHOLE_VIDEO_BYTES = 2 << 30
END_BYTES = 4 << 20
_CACHE: dict[tuple, dict] = {}


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))


def _is_video(relative: str) -> bool:
    return relative.startswith("videos/")


def _digest(path: Path, ends_only: bool) -> str:
    digest = hashlib.sha256()
    size = path.stat().st_size
    with path.open("rb") as f:
        if ends_only and size > 2 * END_BYTES:
            digest.update(f"{size}\0".encode())
            digest.update(f.read(END_BYTES))
            f.seek(size - END_BYTES)
            digest.update(f.read(END_BYTES))
        else:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def dataset_fingerprint(root: str | Path) -> dict:
    """{"sha256", "tables_sha256", "files", "bytes", "videos"} of the dataset folder at `root` (the files in path
    order, each digested with its path relative to the root; `videos`: "whole", or "ends" where they were digested
    by their size and ends); computed once per process for an unchanged folder."""
    root = Path(root)
    files = _files(root)
    sizes = [p.stat().st_size for p in files]
    key = (str(root.resolve()), tuple((str(p), size, p.stat().st_mtime_ns) for p, size in zip(files, sizes)))
    if key in _CACHE:
        return _CACHE[key]
    relative = [p.relative_to(root).as_posix() for p in files]
    ends_only = sum(size for size, name in zip(sizes, relative) if _is_video(name)) > WHOLE_VIDEO_BYTES
    whole, tables = hashlib.sha256(), hashlib.sha256()
    for path, name in zip(files, relative):
        line = f"{name}\0{_digest(path, ends_only and _is_video(name))}\n".encode()
        whole.update(line)
        if not _is_video(name):
            tables.update(line)
    _CACHE[key] = {
        "sha256": whole.hexdigest(),
        "tables_sha256": tables.hexdigest(),
        "files": len(files),
        "bytes": sum(sizes),
        "videos": "ends" if ends_only else "whole",
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
