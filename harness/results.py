"""Result files: the JSON contract that gates, tables and users read (docs/measuring.md describes the keys).

A run writes its header at once and rewrites the file atomically after every rung, so an
interrupted run keeps every rung that finished and the file is never half-written.
"""

from __future__ import annotations

import copy
import datetime
import importlib.metadata
import json
import math
import os
import platform
import re
import shlex
import socket
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from models.schema import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, Bounds, Expect, SchemaError, describe, parse

from . import kinds
from .errors import InputError
from .stats.result_checks import Mismatch

SCHEMA = "vlabench.result/1"
RungStatus = Literal["ok", "oom", "error", "unsupported", "skipped"]
RUNG_STATUSES = get_args(RungStatus)

_REPO_ROOT = Path(__file__).resolve().parent.parent
# results/<target>/ holds the recorded baselines (<scenario>.json) at its top; below it, EVIDENCE/ holds the runs,
# logs and machine notes the docs cite, and HISTORY/<scenario>/ the baselines `vlabench record` replaced
# (results/README.md).
EVIDENCE, HISTORY = "evidence", "history"


class ResultError(InputError):
    """A result file the harness cannot use."""


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=_REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None  # git missing or hung
    return out.stdout.strip() if out.returncode == 0 else None


def _dist_version(*names: str) -> str | None:
    """Installed version of the first distribution found, without importing it."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def host_facts() -> dict:
    """The host CPU that feeds the accelerator: its model and how many cores this process may use (a data path with
    loader workers is as fast as these let it be, so two hosts of one GPU can read differently)."""
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        pass
    visible = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu_model": model or platform.processor() or None, "cpus_visible": visible, "cpu_count": os.cpu_count()}


def host_probe_ms(result: dict) -> float | None:
    """The median host probe over the result's rungs, in ms (harness/machine/probe.py: 1000 in-place CPU tensor adds
    on one thread): how fast this host dispatches ops, which an eager, launch-bound step follows while its data wait
    stays near zero. None where no rung recorded it (a CPU target)."""
    times = sorted(
        t
        for r in result.get("rungs", [])
        if isinstance(r, dict) and isinstance(r.get("machine_probe"), dict)
        for t in r["machine_probe"].get("host_times_s") or []
        if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0
    )
    return 1e3 * times[len(times) // 2] if times else None


def host_summary(result: dict, visible: str = "") -> str | None:
    """The host that fed the card in a few words: its CPU, the cores this process could use and the dispatch probe's
    median (`visible`: a word after the core count); None where the result records neither."""
    host, probe = result.get("provenance", {}).get("host"), host_probe_ms(result)
    parts = [f"{host['cpu_model']}, {host['cpus_visible']} cores{visible}"] if host else []
    if probe is not None:
        kernel = next(
            (
                r["machine_probe"]["host_kernel"]
                for r in result["rungs"]
                if "host_kernel" in (r.get("machine_probe") or {})
            ),
            "the host probe",
        )
        parts.append(f"dispatch probe {probe:.1f} ms ({kernel})")
    return ", ".join(parts) or None


UNKNOWN_COMMIT = "unknown"


def commit_argument(value: str) -> str:
    """`--commit SHA`: a commit id as git prints it (7 to 40 hex digits); raises InputError otherwise."""
    if not re.fullmatch(r"[0-9a-f]{7,40}", value or ""):
        raise InputError("--commit", None, "a commit id (7 to 40 lowercase hex digits)", repr(value))
    return value


def provenance(command: list[str], commit: str | None = None) -> dict:
    """Where and how a result was produced: code version, library versions, machine, time.

    The commit comes from this checkout's git, or from an explicit claim recorded as one: `commit` (the command's
    `--commit SHA`) or the environment's VLABENCH_GIT_SHA (a copy of the tree shipped to another machine), in that
    order. With neither a checkout nor a claim it is "unknown" and `dirty` null. `git_sha_from` says which (one of
    harness/stats/provenance_checks.py GIT_SHA_FROM: a file saying anything else was edited by hand)."""
    import torch

    git_sha = _git("rev-parse", "HEAD")  # None outside a checkout or before the first commit
    # Result files land under results/ inside the checkout; they do not make the code dirty.
    # Untracked files (carried wheels, scratch output) are not code that ran; modified tracked files are.
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results")
    sha_from, dirty = "git", None if status is None or git_sha is None else bool(status)
    seen = None
    claim = ("--commit", commit) if commit else ("VLABENCH_GIT_SHA", os.environ.get("VLABENCH_GIT_SHA"))
    if claim[1]:
        # A copy of the tree shipped to a remote machine: its .git may be missing or stale (a copy of an older
        # checkout whose HEAD is not the commit sent), so the sender's word on the commit and on uncommitted
        # changes wins; what the local git said is kept beside it when it differs.
        if git_sha is not None and (git_sha, dirty) != (claim[1], False):
            seen = {"git_sha": git_sha, "dirty": dirty}
        sha_from, git_sha = claim
        dirty = {"0": False, "1": True}.get(os.environ.get("VLABENCH_GIT_DIRTY", ""))
    elif git_sha is None:  # no checkout and no claim: said so, never left blank for someone to fill in
        sha_from, git_sha, dirty = "unknown", UNKNOWN_COMMIT, None
    return {
        "git_sha": git_sha,
        "git_sha_from": sha_from,
        "dirty": dirty,
        **({"local_git": seen} if seen else {}),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": _dist_version("triton", "pytorch-triton"),
        "torch_npu": _dist_version("torch_npu"),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "host": host_facts(),
        "created_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": shlex.join(command),
    }


def _jsonable(value: Any) -> Any:
    """NaN and infinities become null (JSON has no such numbers); tuples become lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _new_file_mode(path: Path) -> int:
    """The mode the file keeps (an existing file's, e.g. 0644), or the one `open()` would give a new file."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)  # the only way to read it; set straight back
        os.umask(umask)
        return 0o666 & ~umask


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write `text` to `path` through a temporary file in the same directory and os.replace: readers see the old
    file or the new one, never a partial one. A symlink is followed (the file it points to is rewritten, the link
    stays a link) and an existing file keeps its mode. Returns the path written."""
    path = Path(os.path.realpath(path))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _new_file_mode(path))  # mkstemp makes it 0600
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def _write_atomic(path: Path, data: dict):
    write_text_atomic(path, json.dumps(data, indent=1, allow_nan=False) + "\n")  # dumps fails before touching disk


class ResultWriter:
    """Writes one run's result file: the header now, then the file again after each rung."""

    def __init__(self, path, header: dict):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"schema": SCHEMA, **header}
        data.setdefault("rungs", [])
        self._commit(data)

    def _commit(self, data: dict):
        # Hold exactly what the file holds (a fresh copy, NaN as None), and only once it is written.
        data = _jsonable(data)
        _write_atomic(self.path, data)
        self._data = data

    def append_rung(self, rung: dict):
        if rung.get("status") not in RUNG_STATUSES:
            raise ValueError(f"rung status must be one of {', '.join(RUNG_STATUSES)}, got {rung.get('status')!r}")
        data = dict(self._data)
        data["rungs"] = [*self._data["rungs"], rung]
        self._commit(data)

    def set(self, key: str, value: Any):
        """Add or replace an extra top-level key (e.g. a summary once the ladder is done)."""
        data = dict(self._data)
        data[key] = value
        self._commit(data)

    def update(self, values: dict):
        """Set several top-level keys in one write, so readers never see them out of step with each other."""
        self._commit({**self._data, **values})

    @property
    def data(self) -> dict:
        return copy.deepcopy(self._data)


PositiveNumber = Annotated[float, POSITIVE]


@dataclass(frozen=True)
class _Named:
    __open_schema__ = True
    name: str


@dataclass(frozen=True)
class MachineProbeRecord:
    __open_schema__ = True
    kernel: str
    times_s: Annotated[tuple[PositiveNumber, ...], AT_LEAST_ONE]
    repeats: Annotated[int, AT_LEAST_ONE] = 1


@dataclass(frozen=True)
class LossParityRecord:
    """A rung's stated loss parity: recomputed from the stored losses on load (harness/stats/parity.py)."""

    __open_schema__ = True
    tolerance: Annotated[float, NON_NEGATIVE] | None = None
    max_rel_diff: Annotated[float, NON_NEGATIVE] | None = None
    against: str | None = None


@dataclass(frozen=True)
class RepeatRecord:
    """One repeat of a rung (a fresh process each): its own status and, when ok, its own step figures."""

    __open_schema__ = True
    status: RungStatus
    samples_per_s: PositiveNumber | None = None
    samples_per_s_p10: PositiveNumber | None = None
    samples_per_s_p90: PositiveNumber | None = None
    step_time_s: PositiveNumber | None = None
    step_times_s: Annotated[tuple[PositiveNumber, ...], AT_LEAST_ONE] | None = None
    machine_probe: MachineProbeRecord | None = None

    def __post_init__(self):
        if self.status == "ok":
            for key in ("samples_per_s", "step_times_s"):
                if getattr(self, key) is None:
                    raise SchemaError(key, "a value (the repeat is ok)", "nothing")


@dataclass(frozen=True)
class RungRecord:
    """The keys of a rung record that tables and gates compute with: present, finite and positive where a
    division or a ratio needs them, so a broken file is refused in one line instead of crashing a command."""

    __open_schema__ = True
    name: str
    status: RungStatus
    reason: str | None = None
    samples_per_s: PositiveNumber | None = None
    samples_per_s_p10: PositiveNumber | None = None
    samples_per_s_p90: PositiveNumber | None = None
    step_time_s: PositiveNumber | None = None
    step_times_s: Annotated[tuple[PositiveNumber, ...], AT_LEAST_ONE] | None = None
    # a non-finite loss was written as null: a finding, not a broken file
    losses: Annotated[tuple[float | None, ...], Expect("a list of numbers (null for a non-finite loss)")] | None = None
    peak_memory_gib: Annotated[float, NON_NEGATIVE] | None = None
    # the figures tables print beside samples/s
    peak_reserved_gib: Annotated[float, NON_NEGATIVE] | None = None
    mfu: Annotated[float, NON_NEGATIVE] | None = None
    compile_s: Annotated[float, NON_NEGATIVE] | None = None
    warmup_s: Annotated[float, NON_NEGATIVE] | None = None
    data_wait_ms: Annotated[float, NON_NEGATIVE] | None = None
    data_wait_share: Annotated[float, NON_NEGATIVE] | None = None
    loss_parity: LossParityRecord | None = None
    machine_probe: MachineProbeRecord | None = None
    speedup_vs_baseline: PositiveNumber | None = None
    speedup_vs_previous: PositiveNumber | None = None
    # a rung measured in several processes: samples_per_s is then the median over the ok repeats
    repeats: Annotated[tuple[RepeatRecord, ...], AT_LEAST_ONE] | None = None

    def __post_init__(self):
        if self.status != "ok" and not self.reason:
            raise SchemaError("reason", f"a reason for status {self.status!r}", describe(self.reason))
        if self.status == "ok":
            for key in ("samples_per_s", "step_times_s", "losses"):
                if getattr(self, key) is None:
                    raise SchemaError(key, "a value (the rung is ok)", "nothing")


@dataclass(frozen=True)
class SuccessEntry:
    __open_schema__ = True
    successes: Annotated[int, NON_NEGATIVE]
    trials: Annotated[int, AT_LEAST_ONE]
    rate: Annotated[float, Bounds(0, 1)] | None = None
    wilson_low: Annotated[float, Bounds(0, 1)] | None = None
    wilson_high: Annotated[float, Bounds(0, 1)] | None = None

    def __post_init__(self):
        if self.successes > self.trials:
            raise SchemaError(None, "successes <= trials", f"successes {self.successes}, trials {self.trials}")


@dataclass(frozen=True)
class EpisodeRecord:
    """What the success rates are counted from (harness/stats/rates.py success_rates)."""

    __open_schema__ = True
    suite: str
    task: Annotated[int, NON_NEGATIVE]
    status: str
    success: bool | None = None


@dataclass(frozen=True)
class ResultWorkload:
    __open_schema__ = True
    batch_size: Annotated[int, AT_LEAST_ONE] | None = None  # ladders have one; evaluations do not


@dataclass(frozen=True)
class EvalLatency:
    __open_schema__ = True
    median: Annotated[float, NON_NEGATIVE] | None = None
    p10: Annotated[float, NON_NEGATIVE] | None = None
    p90: Annotated[float, NON_NEGATIVE] | None = None
    first_call: Annotated[float, NON_NEGATIVE] | None = None

    def __post_init__(self):
        if (self.p10 is None) != (self.p90 is None) or (self.p10 is not None and self.median is None):
            raise SchemaError("p10", "p10, p90 and the median together", "some of them")


@dataclass(frozen=True)
class UtilisationRecord:
    __open_schema__ = True
    mean: Annotated[float, NON_NEGATIVE]
    p90: Annotated[float, NON_NEGATIVE]


@dataclass(frozen=True)
class UtilisationBlock:
    __open_schema__ = True
    cpu_percent: UtilisationRecord | None = None
    gpu_percent: UtilisationRecord | None = None


@dataclass(frozen=True)
class EvalThroughput:
    """An evaluation's speed block, as its table prints it (harness/report/report.py eval_throughput_row)."""

    __open_schema__ = True
    workers: Annotated[int, NON_NEGATIVE]
    episodes: Annotated[int, NON_NEGATIVE]
    env_steps: Annotated[int, NON_NEGATIVE]
    policy_calls: Annotated[int, NON_NEGATIVE]
    env_steps_per_s: Annotated[float, NON_NEGATIVE] | None = None
    wall_s: Annotated[float, NON_NEGATIVE] | None = None
    sim_steps_per_s_per_worker: Annotated[float, NON_NEGATIVE] | None = None
    batch_size_mean: Annotated[float, NON_NEGATIVE] | None = None
    policy_latency_per_chunk_s: Annotated[float, NON_NEGATIVE] | None = None
    policy_latency_s: EvalLatency | None = None
    utilisation: UtilisationBlock | None = None


@dataclass(frozen=True)
class ResultFile:
    """What every reader of a result file relies on; the rest of the file is kept as it is."""

    __open_schema__ = True
    schema: Literal["vlabench.result/1"]
    scenario: _Named
    target: _Named
    provenance: dict[str, Any]
    workload: ResultWorkload
    rungs: Annotated[tuple[RungRecord, ...], Expect("a list of rung records")]
    nproc: Annotated[int, AT_LEAST_ONE] = 1
    success_rate: dict[str, SuccessEntry] | None = None
    episodes: Annotated[tuple[EpisodeRecord, ...], Expect("a list of episode records")] | None = None
    throughput: EvalThroughput | None = None


def load_result(path, any_kind: bool = False) -> dict:
    """Read a result file and check what other tools compute with; raises a one-line ResultError.

    The registry says first which kind the file is (harness/kinds); its schema is parsed next: the ResultFile schema,
    or the kind's own (a profile's). A file of a kind with its own schema is refused unless `any_kind` (`vlabench
    show`, which only prints each kind's table): the other commands compute with a ResultFile's rungs."""
    path = str(path)

    def fail(key, expected, got):
        raise ResultError(path, key, expected, got)

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        fail(None, "an existing result file", "no such file")
    except (OSError, UnicodeDecodeError) as e:
        fail(None, "a readable UTF-8 result file", str(e))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        fail(f"line {e.lineno}", "valid JSON", e.msg)
    except RecursionError:  # arrays or objects nested thousands deep
        fail(None, "JSON nested as deep as the parser allows", "deeper nesting")
    if not isinstance(data, dict):
        fail("(top level)", "a JSON object", describe(data))
    try:
        kind = kinds.kind_of(data)  # harness/kinds: the one registered kind that recognises the file
    except kinds.UnknownKind as e:
        fail(e.key, e.expected, e.got)
    if kind.schema is not None and not any_kind:
        fail(
            "kind",
            "a result file of a run (ladder, evaluation, training, ...)",
            f"{'an' if kind.name[0] in 'aeiou' else 'a'} {kind.name} (`vlabench show` prints it)",
        )
    try:
        parse(kind.schema or ResultFile, data)
    except SchemaError as e:
        fail(e.key, e.expected, e.got)
    try:
        kind.check(data)  # counts, names, blocks and figures (harness/kinds, harness/stats/result_checks.py)
    except (Mismatch, SchemaError) as e:
        fail(e.key, e.expected, e.got)
    return data


def load_results(paths, any_kind: bool = False) -> list[tuple[str, dict]]:
    """(path, result) of each file, in order, as `compare` and `report` read their arguments (`show`: any kind)."""
    return [(str(p), load_result(p, any_kind)) for p in paths]


def measured_result_files(results_dir: Path) -> list[Path]:
    """The recorded baselines: results/<target>/*.json (not the evidence/ and history/ below them);
    results/published/ holds figures from sources."""
    return sorted(p for p in Path(results_dir).glob("*/*.json") if p.parent.name != "published")


def result_files(paths) -> list[Path]:
    """The files as given, a directory standing for the measured results in it: *.json of one target's folder
    (results/h200), or results/<target>/*.json of a results directory (one with no *.json of its own)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(p.glob("*.json")) or measured_result_files(p)
        else:
            out.append(p)
    return out
