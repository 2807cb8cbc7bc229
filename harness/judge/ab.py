"""`vlabench ab BASE HEAD SCENARIO`: an A/B of two versions of the code on one machine (docs/ab.md).

Each side is a git ref (checked out with `git worktree add --detach` into a temporary directory, removed
afterwards) or a directory holding a vlabench tree. Each side runs `python -m harness.cli run` from its own
tree, one process at a time, alternating A B, B A, A B ... for N pairs, so both sides share every minute of the
machine and neither always runs second.
Each rung is decided from the paired throughput ratios B/A with harness/stats/spread.py's one slowdown rule, and a pass
that cannot rule out twice the tolerance is inconclusive (RULE 2).
"""

from __future__ import annotations

import datetime
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from tabulate import tabulate

from ..errors import InputError
from ..kinds._ab_schema import AB_SCHEMA
from ..ladder.processes import run_group
from ..results import ResultError, load_result
from ..stats.batch_sizes import BatchSizes
from ..stats.spread import SLOWER, UNRESOLVED, WITHIN_NOISE, Ratio, paired_ratio, slowdown, t_quantile, whole_rate

SCHEMA = AB_SCHEMA  # ab.json's `schema`: its load-time checks and `vlabench show` table are harness/kinds/ab.py's
FAIL, PASS, FASTER, INCONCLUSIVE, NOT_GATED = "FAIL", "pass", "pass (faster)", "inconclusive", "not gated"
EXIT_PASS, EXIT_FAIL, EXIT_UNUSABLE, EXIT_INCONCLUSIVE = 0, 1, 2, 3
BISECT_SKIP = 125  # `git bisect run`: skip this commit (1-124 would mark it bad)
MAX_PAIRS = 1000  # beyond this, "more pairs are unlikely to decide"
# The version of the rate rule below, recorded in ab.json (`rule`; a file without one has rule 1), so that loading a
# file derives its verdicts again by the rule it was decided by. Rule 1 passed on the point estimate whatever the
# interval; rule 2 (2026-12-07) reads a pass whose interval reaches beyond twice the tolerance inconclusive: on an
# H200 host, 5 pairs of GR00T's async-input rung with every step of B 10% longer read 0.956 (0.898-1.018), a pass.
RULE = 2
# where a side's tree defines `vlabench run`'s options: harness/commands/run.py, in older trees ladder/run_cli.py
RUN_COMMAND_FILES = ("commands/run.py", "ladder/run_cli.py")


@dataclass
class Side:
    """One version of the code: a git ref of `repo` (resolved to `commit`) or a directory (`tree`)."""

    label: str  # "A" (the base) or "B" (the head)
    spec: str  # as given on the command line
    env: dict[str, str]
    repo: Path | None = None
    commit: str | None = None
    tree: Path | None = None  # where its code runs from: the directory given, or the ref's worktree

    def describe(self) -> str:
        if self.commit:
            return f"{self.spec} at {self.commit[:12]} of {self.repo}"
        return f"the tree at {self.tree}"

    def line(self) -> str:
        """`A: ...` as `vlabench ab` prints it, and `vlabench show` prints it again from ab.json."""
        extra = " with " + " ".join(f"{k}={v}" for k, v in self.env.items()) if self.env else ""
        return f"{self.label}: {self.describe()}{extra}"

    def as_dict(self) -> dict:
        where = {"commit": self.commit, "repo": str(self.repo)} if self.commit else {"path": str(self.tree)}
        return {"spec": self.spec, **where, "env": self.env}

    @classmethod
    def from_dict(cls, label: str, d: dict) -> Side:
        """A side as ab.json holds it (as_dict)."""
        repo, tree = d.get("repo"), d.get("path")
        return cls(
            label, d["spec"], d["env"], Path(repo) if repo else None, d.get("commit"), Path(tree) if tree else None
        )


@dataclass
class Config:
    scenario: Path  # absolute
    name: str  # the scenario's
    target: str
    rungs: list[str]
    pairs: int
    tolerance: float
    confidence: float
    out: Path
    rung_timeout_s: float | None
    pin_cpu: int | None = None  # a CPU target: every run on this one CPU with one thread (None: --no-pin, or a GPU)


# A CPU target's runs, both sides: one intra-op thread each, on one CPU. With the default threads (one per core),
# the rung's threads wait for each other at every op, so another job on any core slows a run by far more than its
# share: issue 52 reports a real 20% slowdown read B/A 0.58 with an interval of 0.04-7.7 (inconclusive) and, pinned,
# 0.85 [0.76-0.95] (FAIL).
PIN_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
PIN_LAUNCHER = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])}); os.execv(sys.argv[2], sys.argv[2:])"


def pin_cpu(allowed: set[int] | None = None) -> int | None:
    """The CPU both sides' runs share: the last one this process may use (away from CPU 0, where the kernel's own
    work tends to land); None where affinity cannot be set."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return max(allowed if allowed is not None else os.sched_getaffinity(0))


def pinned(cmd: list[str], cpu: int | None) -> list[str]:
    """`cmd` started on `cpu` alone (the affinity is set in the process, then it becomes `cmd`)."""
    return cmd if cpu is None else [sys.executable, "-c", PIN_LAUNCHER, str(cpu), *cmd]


@dataclass
class Run:
    """One `vlabench run` process of one side."""

    pair: int
    side: str
    file: Path
    returncode: int | None
    wall_s: float
    result: dict | None  # the result file, None when there is no usable one
    error: str | None = None  # why there is none

    @property
    def refused(self) -> bool:
        """The run refused its input (exit 2, no result file): nothing about its speed is known."""
        return self.result is None and self.returncode == 2

    def rung(self, name: str) -> dict:
        if self.result is None:
            return {"status": "error", "reason": self.error}
        found = next((r for r in self.result["rungs"] if r["name"] == name), None)
        return found or {"status": "missing", "reason": "not in the result file"}

    def rate(self, name: str) -> float:
        """Samples/s over the whole run: the global batch over all step times."""
        return whole_rate(self.rung(name)["step_times_s"], BatchSizes.of_result(self.result).global_)

    def as_dict(self) -> dict:
        return {
            "pair": self.pair,
            "side": self.side,
            "file": self.file.name,
            "returncode": self.returncode,
            "wall_s": round(self.wall_s, 3),
            "error": self.error,
        }


@dataclass
class Verdict:
    rung: str
    verdict: str  # FAIL, PASS, FASTER, INCONCLUSIVE or NOT_GATED
    note: str
    pairs: int = 0
    a_rates: list[float] = field(default_factory=list)
    b_rates: list[float] = field(default_factory=list)
    ratio: Ratio | None = None
    more_pairs: int | None = None  # inconclusive: about how many more pairs might decide

    def as_dict(self) -> dict:
        r = self.ratio
        return {
            "rung": self.rung,
            "verdict": self.verdict,
            "note": self.note,
            "pairs": self.pairs,
            "a_samples_per_s": self.a_rates,
            "b_samples_per_s": self.b_rates,
            "ratios": [b / a for a, b in zip(self.a_rates, self.b_rates)],
            "ratio": None if r is None else {"value": r.value, "low": r.low, "high": r.high, "df": r.df},
            "more_pairs": self.more_pairs,
        }


# ---- the two sides -------------------------------------------------------------------------------------------


def _git(where: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"git {args[0]}: {exc}") from None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def is_tree(path: Path) -> bool:
    return (path / "harness").is_dir() and (path / "models").is_dir()


def find_repo(repo: str | None) -> Path:
    where = Path(repo or ".")
    done = _git(where, "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        got = f"{where.resolve()} ({_last_line(done.stderr)})"
        raise InputError("--repo", None, "a git repository to take BASE and HEAD refs from", got)
    return Path(done.stdout.strip())


def resolve_side(label: str, spec: str, repo: str | None, env: dict[str, str]) -> Side:
    """A directory holding a vlabench tree, else a git ref of the repository, resolved to its commit."""
    name = {"A": "BASE", "B": "HEAD"}[label]
    if is_tree(Path(spec)):
        return Side(label, spec, env, tree=Path(spec).resolve())
    if Path(spec).is_dir():
        raise InputError(name, None, "a git ref or a directory holding a vlabench tree (harness/ and models/)", spec)
    root = find_repo(repo)
    done = _git(root, "rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}")
    if done.returncode != 0:
        raise InputError(name, None, f"a git ref of {root} or a directory holding a vlabench tree", repr(spec))
    return Side(label, spec, env, repo=root, commit=done.stdout.strip())


@contextmanager
def checked_out(sides: list[Side]) -> Iterator[None]:
    """Each ref side checked out (`git worktree add --detach`) in a temporary directory, removed afterwards,
    also on errors and Ctrl-C."""
    tmp = Path(tempfile.mkdtemp(prefix="vlabench-ab-"))
    added: list[tuple[Path, Path]] = []
    try:
        for side in (s for s in sides if s.commit):
            where = tmp / side.label.lower()
            done = _git(side.repo, "worktree", "add", "--detach", str(where), side.commit)
            if done.returncode != 0:
                raise RuntimeError(f"git worktree add {side.commit[:12]}: {_last_line(done.stderr)}")
            added.append((side.repo, where))
            if not is_tree(where):
                expected = "a commit holding a vlabench tree (harness/ and models/)"
                raise InputError({"A": "BASE", "B": "HEAD"}[side.label], None, expected, side.commit[:12])
            side.tree = where
        yield
    finally:
        for repo, where in added:
            _git(repo, "worktree", "remove", "--force", str(where))
        shutil.rmtree(tmp, ignore_errors=True)
        for repo in {repo for repo, _ in added}:
            _git(repo, "worktree", "prune")


# ---- running ---------------------------------------------------------------------------------------------------


def run_command(cfg: Config, rungs: list[str], out: Path, tree: Path | None = None) -> list[str]:
    """One process of a side: a single run (the pairs are the A/B's repeats), where the side's code knows
    `--repeats` (older trees run once anyway)."""
    cmd = [sys.executable, "-m", "harness.cli", "run", str(cfg.scenario), "--target", cfg.target]
    cmd += ["--rungs", ",".join(rungs), "--out", str(out)]
    if tree is None or any("--repeats" in _read(tree / "harness" / path) for path in RUN_COMMAND_FILES):
        cmd += ["--repeats", "1"]
    return cmd + (["--rung-timeout", f"{cfg.rung_timeout_s:g}"] if cfg.rung_timeout_s else [])


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def run_side(cfg: Config, side: Side, pair: int, rungs: list[str]) -> Run:
    """One `vlabench run` of `side`'s code (cwd and PYTHONPATH its tree), writing DIR/<a|b>-<pair>.json."""
    out = cfg.out / f"{side.label.lower()}-{pair}.json"
    out.unlink(missing_ok=True)  # a file from an earlier A/B into the same DIR is not this run's
    pin_env = PIN_ENV if cfg.pin_cpu is not None else {}
    env = {**os.environ, **pin_env, **side.env, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(side.tree), env.get("PYTHONPATH")) if p)
    started = time.perf_counter()
    cmd = pinned(run_command(cfg, rungs, out, side.tree), cfg.pin_cpu)
    done = run_group(cmd, env, lambda _: None, None, cwd=side.tree)
    wall = time.perf_counter() - started
    if not out.exists():
        why = f"the run exited {done.returncode} without a result file: {' | '.join(done.tail[-2:]) or 'no output'}"
        return Run(pair, side.label, out, done.returncode, wall, None, why)
    try:
        return Run(pair, side.label, out, done.returncode, wall, load_result(out))
    except ResultError as exc:
        return Run(pair, side.label, out, done.returncode, wall, None, str(exc))


def run_line(run: Run, rungs: list[str]) -> str:
    """What one process measured: each rung's whole-run samples/s, or its status."""

    def one(name: str) -> str:
        rec = run.rung(name)
        if rec["status"] == "ok":
            return f"{name} {run.rate(name):.2f} samples/s"
        return f"{name} {rec['status']}" + (f" ({rec['reason']})" if rec.get("reason") else "")

    return ", ".join(one(n) for n in rungs) + f" ({run.wall_s:.0f}s)"


def alternate(cfg: Config, sides: list[Side], stream: TextIO, save: Callable[[list[Run]], object]) -> list[Run]:
    """A B, B A, A B ... for `cfg.pairs` pairs; returns the runs in that order. The order turns every pair, so a
    cost of running second, or a drift of the machine, falls on both sides alike (an A/A run whose B always ran
    second read 6% slower in three pairs out of three on a CI machine). A rung whose status alone decides it
    (failed in A, or in B where A was ok) is left out of later pairs; with none left, it stops early."""
    runs: list[Run] = []
    for i in range(1, cfg.pairs + 1):
        pending = [r for r in cfg.rungs if status_verdict(r, pairs_of(runs)) is None]
        if not pending:
            done = f"{i - 1} pair" + ("s" if i > 2 else "")
            print(f"stopped after {done}: every rung is decided by its status alone", file=stream)
            break
        for side in sides if i % 2 else sides[::-1]:
            print(f"[pair {i}/{cfg.pairs}] {side.label}: ", end="", flush=True, file=stream)
            runs.append(run_side(cfg, side, i, pending))
            print(run_line(runs[-1], pending) if runs[-1].result else runs[-1].error, file=stream, flush=True)
            save(runs)
    return runs


def pairs_of(runs: list[Run]) -> list[tuple[Run, Run]]:
    """The complete pairs, as (A's run, B's run), in the order they ran."""
    by_pair: dict[int, dict[str, Run]] = {}
    for run in runs:
        by_pair.setdefault(run.pair, {})[run.side] = run
    return [(pair["A"], pair["B"]) for pair in by_pair.values() if "A" in pair and "B" in pair]


# ---- the decision ----------------------------------------------------------------------------------------------


def status_verdict(name: str, pairs: list[tuple[Run, Run]]) -> Verdict | None:
    """FAIL when B failed where A was ok (any pair); NOT_GATED when A failed, or B refused its input (exit 2: e.g.
    the scenario needs what an older B lacks); None when every pair ran the rung."""
    for i, (a, b) in enumerate(pairs, 1):
        ra, rb = a.rung(name), b.rung(name)
        if ra["status"] == "ok" and rb["status"] != "ok" and not b.refused:
            note = f"B {rb['status']} in pair {i} where A was ok: {rb.get('reason') or '-'}"
            return Verdict(name, FAIL, note, len(pairs))
    for i, (a, b) in enumerate(pairs, 1):
        for run in (a, b):
            rec = run.rung(name)
            if rec["status"] != "ok" and (run is a or run.refused):
                note = f"{run.side} {rec['status']} in pair {i}: {rec.get('reason') or '-'}"
                return Verdict(name, NOT_GATED, note, len(pairs))
    return None


def pairs_to_decide(ratios: list[float], confidence: float, bound: float = 1.0) -> int | None:
    """About how many more pairs would bring the interval clear of `bound` if the mean and spread of the log ratios
    stayed as they are: its upper end below 1 (a slowdown decided), or with `bound` below 1 its lower end above it
    (so much slowdown ruled out); None when even MAX_PAIRS would not."""
    logs = [math.log(r) for r in ratios]
    m, s = statistics.mean(logs), statistics.stdev(logs)
    gap = m - math.log(bound) if bound < 1 else -m  # how far the mean is from the bound, in logs
    if gap <= 0 or s == 0:
        return None

    def decides(n: int) -> bool:
        return t_quantile(0.5 + confidence / 2, n - 1) * s / math.sqrt(n) < gap

    lo, hi = len(ratios), MAX_PAIRS  # decides(hi) must hold for the search below
    if not decides(hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decides(mid) else (mid, hi)
    return hi - len(ratios)


def _more(n: int | None) -> str:
    return f"about {n} more pair{'s' if n > 1 else ''} might decide" if n else "more pairs are unlikely to decide"


def rate_verdict(v: Verdict, ratios: list[float], tolerance: float, confidence: float, rule: int = RULE) -> Verdict:
    """The verdict of the paired ratios by the rate rule of version `rule` (RULE: new A/Bs; an older file's own)."""
    tol, r = f"{tolerance * 100:g}%", v.ratio
    if r is None:
        v.verdict, v.note = INCONCLUSIVE, "one pair gives no interval: run 2 or more"
        return v
    outcome = slowdown(r, tolerance)
    if outcome == SLOWER:
        v.verdict, v.note = FAIL, f"{1 - r.value:.1%} slower: beyond the {tol} tolerance and outside the noise"
    elif outcome == WITHIN_NOISE:
        v.verdict, v.more_pairs = INCONCLUSIVE, pairs_to_decide(ratios, confidence)
        more = _more(v.more_pairs)
        v.note = f"{1 - r.value:.1%} slower, beyond the {tol} tolerance, but the interval reaches {r.high:.3f}: {more}"
    elif r.low > 1:
        v.verdict, v.note = FASTER, f"{r.value - 1:.1%} faster: the whole interval is above 1"
    elif rule >= 2 and outcome == UNRESOLVED:  # within the tolerance by the point estimate only
        v.verdict, v.more_pairs = INCONCLUSIVE, pairs_to_decide(ratios, confidence, 1 - 2 * tolerance)
        v.note = (
            f"{r.value - 1:+.1%}, within the {tol} tolerance, but the interval reaches {1 - r.low:.1%} slower, beyond "
            f"twice the tolerance: {_more(v.more_pairs)}"
        )
    else:
        v.verdict, v.note = PASS, f"{r.value - 1:+.1%}: within the {tol} tolerance"
        if r.low < 1 - tolerance:  # the rule passes on the point estimate; say what the noise leaves open
            v.note += f" (the interval cannot rule out {1 - r.low:.0%} slower: more pairs would narrow it)"
    return v


def decide(name: str, pairs: list[tuple[Run, Run]], tolerance: float, confidence: float) -> Verdict:
    """One rung's verdict from the complete pairs: status first, then the paired ratios B/A of whole-run rates."""
    found = status_verdict(name, pairs)
    if found is not None:
        return found
    if not pairs:
        return Verdict(name, NOT_GATED, "no complete pair")
    a_rates, b_rates = [a.rate(name) for a, _ in pairs], [b.rate(name) for _, b in pairs]
    ratios = [b / a for a, b in zip(a_rates, b_rates)]
    v = Verdict(name, "", "", len(pairs), a_rates, b_rates, paired_ratio(ratios, confidence))
    return rate_verdict(v, ratios, tolerance, confidence)


def exit_code(verdicts: list[Verdict]) -> int:
    kinds = {v.verdict for v in verdicts}
    if FAIL in kinds:
        return EXIT_FAIL
    if INCONCLUSIVE in kinds:
        return EXIT_INCONCLUSIVE
    return EXIT_UNUSABLE if kinds <= {NOT_GATED} else EXIT_PASS


def bisect_exit(code: int) -> int:
    """For `git bisect run`: pass 0 (good), regression 1 (bad), inconclusive or unusable 125 (skip)."""
    return code if code in (EXIT_PASS, EXIT_FAIL) else BISECT_SKIP


# ---- output ----------------------------------------------------------------------------------------------------


def summary(verdicts: list[Verdict], tolerance: float) -> str:
    word = {EXIT_PASS: "PASS", EXIT_FAIL: "FAIL", EXIT_UNUSABLE: "UNUSABLE", EXIT_INCONCLUSIVE: "INCONCLUSIVE"}
    groups = (
        (FAIL, "regressed in B"),
        (INCONCLUSIVE, "inconclusive (more pairs may decide)"),
        (PASS, f"within the {tolerance * 100:g}% tolerance"),
        (FASTER, "faster in B"),
        (NOT_GATED, "not gated"),
    )
    parts = []
    for kind, what in groups:
        names = [v.rung for v in verdicts if v.verdict == kind]
        if names:
            parts.append(f"{len(names)} {what}: {', '.join(names)}")
    return f"{word[exit_code(verdicts)]}: " + "; ".join(parts)


def table(verdicts: list[Verdict], confidence: float, fmt: str = "simple") -> str:
    def median(xs: list[float]) -> str:
        return f"{statistics.median(xs):.2f}" if xs else "-"

    def ratio(r: Ratio | None) -> str:
        return "-" if r is None else f"{r.value:.3f} ({r.low:.3f}-{r.high:.3f})"

    rows = [
        [v.rung, v.pairs, median(v.a_rates), median(v.b_rates), ratio(v.ratio), v.verdict, v.note] for v in verdicts
    ]
    headers = ["rung", "pairs", "A samples/s", "B samples/s", f"B/A ({confidence:.0%} interval)", "verdict", "note"]
    return tabulate(rows, headers=headers, tablefmt=fmt, disable_numparse=True)


def verdict_from_dict(v: dict) -> Verdict:
    """A verdict as ab.json holds it (Verdict.as_dict), for the table of a file read back."""
    r = v.get("ratio")
    ratio = None if r is None else Ratio(r["value"], r["low"], r["high"], "pairs", r["df"])
    a, b = list(v["a_samples_per_s"]), list(v["b_samples_per_s"])
    return Verdict(v["rung"], v["verdict"], v["note"], v["pairs"], a, b, ratio, v.get("more_pairs"))


def ab_table_of_file(doc: dict, fmt: str = "simple") -> str:
    """What `vlabench ab` printed at its end, from its ab.json (`vlabench show`): the sides, the verdicts, the summary."""
    pairs = max((r["pair"] for r in doc["runs"]), default=0)
    lines = [
        f"A/B of {Path(doc['scenario']).stem} on {doc['target']}, {pairs} pair{'s' if pairs != 1 else ''}"
        + (f" ({doc['created_at']})" if doc.get("created_at") else ""),
        Side.from_dict("A", doc["a"]).line(),
        Side.from_dict("B", doc["b"]).line(),
        "",
        table([verdict_from_dict(v) for v in doc["verdicts"]], doc["confidence"], fmt),
        "",
        doc["summary"],
    ]
    return "\n".join(lines)


def document(cfg: Config, sides: list[Side], runs: list[Run], verdicts: list[Verdict], argv: list[str]) -> dict:
    code = exit_code(verdicts)
    return {
        "schema": SCHEMA,
        "created_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": ["vlabench", *argv],
        "scenario": str(cfg.scenario),
        "target": cfg.target,
        "rungs": cfg.rungs,
        "pairs_requested": cfg.pairs,
        "tolerance": cfg.tolerance,
        "confidence": cfg.confidence,
        "rule": RULE,
        "pinned": None if cfg.pin_cpu is None else {"cpu": cfg.pin_cpu, "env": PIN_ENV},
        "a": sides[0].as_dict(),
        "b": sides[1].as_dict(),
        "runs": [r.as_dict() for r in runs],
        "verdicts": [v.as_dict() for v in verdicts],
        "exit_code": code,
        "summary": summary(verdicts, cfg.tolerance),
    }
