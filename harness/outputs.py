"""Checks of what a command is asked to write (`--out`) and of its numeric flags, made before any work starts:
a bad path or number is one `InputError` line, not a traceback after a ladder has run, and an existing result
is never replaced unasked (`--append`/`--resume` merge into it, `--overwrite` replaces it).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tempfile
from pathlib import Path

from models.schema import Match

from . import kinds
from .errors import InputError, describe

__all__ = [
    "PLAIN_NAME",
    "at_least",
    "check_new_files",
    "check_out_dir",
    "check_out_file",
    "check_writable",
    "describe_existing",
    "file_name",
    "inside",
    "positive_seconds",
]

# A name read from a file (a scenario's or a target's) that becomes part of an output path: one file-name
# component, so it cannot climb out of the folder (`..`, `/`), hide (a leading '.'), pass for a flag (a leading
# '-'), carry control characters, or run past a file system's 255-byte limit once the rest of the name is added.
PLAIN_NAME = Match(
    r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}",
    "a plain name (letters, digits, '.', '_', '-'; starting with a letter or digit; at most 100 characters)",
)


def positive_seconds(flag: str, value: float | None) -> None:
    """A time limit (None: no limit) must be a positive, finite number of seconds."""
    if value is not None and not 0 < value < math.inf:
        raise InputError(flag, None, "a positive number of seconds", f"{value:g}")


def at_least(flag: str, value: float | None, low: float, what: str) -> None:
    """An optional count or duration must be at least `low` (None: not given)."""
    if value is not None and not (value >= low and math.isfinite(value)):
        raise InputError(flag, None, what, f"{value:g}")


def file_name(name, file: str, key: str) -> str:
    """`name`, read from `file` at `key`, as a component of an output path; anything but a plain name is refused
    in one line (nothing is rewritten: two different names never become the same file)."""
    if not isinstance(name, str) or not re.fullmatch(PLAIN_NAME.pattern, name):
        raise InputError(file, key, PLAIN_NAME.what, describe(name))
    return name


def inside(folder: str | Path, path: str | Path, file: str, key: str) -> Path:
    """`path`, refused unless it resolves (links followed) to a place inside the resolved `folder`: what is
    written under the folder a user named stays there."""
    if not Path(path).resolve().is_relative_to(Path(folder).resolve()):
        raise InputError(file, key, f"a path inside {folder}", f"{path} (resolves to {Path(path).resolve()})")
    return Path(path)


def check_new_files(folder: str | Path, names: tuple[str, ...], force: bool, flag: str = "--out") -> None:
    """None of `names` exists in `folder` yet, unless `force`: a command never replaces its earlier output unasked."""
    existing = [n for n in names if Path(folder, n).exists()]
    if existing and not force:
        raise InputError(
            str(folder),
            flag,
            f"a folder without {', '.join(names)} (or --force to replace them)",
            f"an existing {', '.join(existing)}",
        )


def check_out_file(
    path: str | Path,
    flag: str = "--out",
    merge_flag: str | None = None,
    merging: bool = False,
    overwrite: bool = False,
) -> None:
    """`path` can take a result file: not a directory or a device, under a writable directory (made if missing),
    and not an existing file unless the command merges into it (`merge_flag`, e.g. --append) or --overwrite."""
    p = Path(path)
    if merging and overwrite:
        raise InputError("--overwrite", None, f"either {merge_flag} (merge) or --overwrite (replace)", "both")
    if p.is_dir():
        raise InputError(str(p), flag, "a file path for the result JSON", "an existing directory")
    if p.exists() and not p.is_file():
        raise InputError(str(p), flag, "a file path for the result JSON", f"an existing {_kind(p)}")
    check_writable(p, flag)
    if p.exists() and not (merging or overwrite):
        how = f"{merge_flag} to merge, --overwrite to replace" if merge_flag else "--overwrite to replace"
        raise InputError(str(p), flag, f"a new file (or {how})", f"an existing {describe_existing(p)}")


def check_out_dir(path: str | Path, flag: str = "--out") -> None:
    """`path` can take a directory of output files: an existing directory or none yet, under a writable one."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(str(p), flag, "a directory (made if missing)", f"an existing {_kind(p)}")
    check_writable(p, flag, directory=p)


def check_writable(p: Path, flag: str = "--out", directory: Path | None = None) -> None:
    """The nearest existing directory at or above `directory` (default: the parent of `p`, where a file or a
    folder renamed into place is written) must take a new file (tried, then removed): this also holds for root,
    for whom a read-only mode bit means nothing, and for read-only mounts."""
    p = Path(p)
    parent = (p.parent if directory is None else directory).absolute()
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(str(p), flag, "a path under a directory", f"{_shown(parent, p)} is a {_kind(parent)}")
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".vlabench-probe-")
    except OSError as e:
        raise InputError(
            str(p), flag, "a path under a writable directory", f"{_shown(parent, p)}: {e.strerror or e}"
        ) from None
    os.close(fd)
    os.unlink(probe)


def _shown(parent: Path, p: Path) -> str:
    """`parent` as the user wrote it (relative when `p` was), else absolute."""
    if not p.is_absolute():
        try:
            return str(parent.relative_to(Path.cwd())) or "."
        except ValueError:
            pass
    return str(parent)


def _kind(p: Path) -> str:
    mode = p.stat().st_mode
    for test, name in (
        (stat.S_ISREG, "file"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "named pipe"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return "special file"


def describe_existing(p: Path) -> str:
    """What an existing output file holds, for a refusal: e.g. `result of pi05-loongforge on h200 with 7 rungs`."""
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return f"file of {p.stat().st_size} bytes (not a vlabench result)"
    if not isinstance(data, dict):
        return "JSON file (not a vlabench result)"
    scenario, target = data.get("scenario"), data.get("target")
    name = scenario.get("name") if isinstance(scenario, dict) else scenario
    target = target.get("name") if isinstance(target, dict) else target
    if not isinstance(name, str) or not isinstance(target, str):
        return "JSON file (not a vlabench result)"
    return kinds.describe(data, name, target)  # e.g. `eval result of ... with 40 episodes` (harness/kinds)
