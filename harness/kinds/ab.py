"""An A/B (`vlabench ab`, harness/judge/ab.py): interleaved pairs of `vlabench run` processes of two versions of
the code and each rung's verdict from the paired ratios B/A. Its file, `ab.json`, is no ResultFile: its schema is its
own (AbFile, told apart by its `schema` value), and only `vlabench show` loads it, printing the verdict table and the
summary line that `vlabench ab` printed when it ran. On load, each verdict's ratios, interval and word are derived
again from its rates with the file's tolerance, confidence and rule (the rate rule's version, harness/judge/ab.py
RULE), and the exit code from the verdicts: a hand-edited verdict is refused."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from models.schema import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, Bounds, Expect, SchemaError

from . import ResultKind, register
from ._ab_schema import AB_SCHEMA

Rate = Annotated[float, POSITIVE]


@dataclass(frozen=True)
class AbRun:
    """One `vlabench run` process of one side (harness/judge/ab.py Run.as_dict)."""

    __open_schema__ = True
    pair: Annotated[int, AT_LEAST_ONE]
    side: Literal["A", "B"]
    file: str
    returncode: int | None
    wall_s: Annotated[float, NON_NEGATIVE]
    error: str | None = None


@dataclass(frozen=True)
class AbSide:
    """One side: a git ref resolved to a commit of a repository, or a directory (harness/judge/ab.py Side.as_dict)."""

    __open_schema__ = True
    spec: str
    env: dict[str, str]
    commit: str | None = None
    repo: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class AbRatio:
    __open_schema__ = True
    value: Rate
    low: Rate
    high: Rate
    df: Annotated[int, AT_LEAST_ONE]


@dataclass(frozen=True)
class AbVerdict:
    """One rung's verdict (harness/judge/ab.py Verdict.as_dict)."""

    __open_schema__ = True
    rung: str
    verdict: Literal["FAIL", "pass", "pass (faster)", "inconclusive", "not gated"]
    note: str
    pairs: Annotated[int, NON_NEGATIVE]
    a_samples_per_s: Annotated[tuple[Rate, ...], Expect("a list of samples/s, one per pair")]
    b_samples_per_s: Annotated[tuple[Rate, ...], Expect("a list of samples/s, one per pair")]
    ratios: Annotated[tuple[Rate, ...], Expect("a list of B/A ratios, one per pair")]
    ratio: AbRatio | None = None
    more_pairs: Annotated[int, AT_LEAST_ONE] | None = None


@dataclass(frozen=True)
class AbFile:
    """What `vlabench ab` writes to `--out`/ab.json (harness/judge/ab.py document)."""

    __open_schema__ = True
    schema: Literal["vlabench.ab/1"]
    scenario: str
    target: str
    rungs: Annotated[tuple[str, ...], Expect("a list of rung names")]
    pairs_requested: Annotated[int, AT_LEAST_ONE]
    tolerance: Annotated[float, Bounds(0, 1)]
    confidence: Annotated[float, Bounds(0, 0.9999, open_low=True)]
    a: AbSide
    b: AbSide
    runs: Annotated[tuple[AbRun, ...], Expect("a list of run records")]
    verdicts: Annotated[tuple[AbVerdict, ...], Expect("a list of verdict records")]
    exit_code: Literal[0, 1, 2, 3]
    summary: str
    created_at: str | None = None
    command: Annotated[tuple[str, ...], Expect("a list of command-line words")] | None = None
    pinned: dict[str, Any] | None = None
    rule: Literal[1, 2] = 1  # the rate rule's version (harness/judge/ab.py RULE); files before 2026-12-07 have none


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def _check_verdict(i: int, v: dict, tolerance: float, confidence: float, rule: int) -> None:
    # here: the registry imports this module on its first lookup (docs/extending.md)
    from ..judge.ab import Verdict, rate_verdict
    from ..stats.spread import paired_ratio

    key = f"verdicts[{i}]"
    a, b, ratios = v["a_samples_per_s"], v["b_samples_per_s"], v["ratios"]
    if not len(a) == len(b) == len(ratios):
        raise SchemaError(f"{key}.ratios", f"as many A rates, B rates and ratios ({len(a)} A rates)", len(ratios))
    if a and len(a) != v["pairs"]:
        raise SchemaError(f"{key}.pairs", f"the number of rate pairs ({len(a)})", v["pairs"])
    for j, (ra, rb, r) in enumerate(zip(a, b, ratios)):
        if not _close(r, rb / ra):
            raise SchemaError(f"{key}.ratios[{j}]", f"B/A of the pair's rates ({rb / ra:.6g})", f"{r:.6g}")
    if not a:  # a verdict from the runs' status (an error in B, a rung A could not run): no rates to derive it from
        if v.get("ratio") is not None:
            raise SchemaError(f"{key}.ratio", "null without rates", "an interval")
        return
    interval = paired_ratio(list(ratios), confidence)
    stored = v.get("ratio")
    if (interval is None) != (stored is None) or (
        interval is not None and not all(_close(getattr(interval, f), stored[f]) for f in ("value", "low", "high"))
    ):
        expected = (
            "null (one pair)" if interval is None else f"{interval.value:.6g} ({interval.low:.6g}-{interval.high:.6g})"
        )
        got = "null" if stored is None else f"{stored['value']:.6g} ({stored['low']:.6g}-{stored['high']:.6g})"
        raise SchemaError(f"{key}.ratio", f"the paired interval of its ratios, {expected}", got)
    derived = rate_verdict(
        Verdict(v["rung"], "", "", len(a), list(a), list(b), interval), list(ratios), tolerance, confidence, rule
    )
    if derived.verdict != v["verdict"]:
        raise SchemaError(
            f"{key}.verdict",
            f"{derived.verdict!r}, as its ratios give at the file's tolerance by its rule ({rule})",
            repr(v["verdict"]),
        )


@register
class Ab(ResultKind):
    name = "ab"
    key = None
    schema = AbFile

    def recognise(self, data: dict) -> bool:
        return data.get("schema") == AB_SCHEMA

    def check(self, data: dict) -> None:
        """Rung names once each and among the A/B's rungs, runs within the pairs, each verdict as its rates give and
        the exit code as the verdicts give."""
        # here: the registry imports this module on its first lookup (docs/extending.md)
        from ..judge.ab import exit_code, verdict_from_dict

        names = [v["rung"] for v in data["verdicts"]]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise SchemaError(f"verdicts[{i}].rung", "each rung's verdict once", f"{name!r} twice")
            if name not in data["rungs"]:
                raise SchemaError(
                    f"verdicts[{i}].rung", "one of the A/B's rungs (" + ", ".join(data["rungs"]) + ")", repr(name)
                )
        for i, run in enumerate(data["runs"]):
            if run["pair"] > data["pairs_requested"]:
                raise SchemaError(
                    f"runs[{i}].pair", f"at most the pairs requested ({data['pairs_requested']})", run["pair"]
                )
        for i, v in enumerate(data["verdicts"]):
            _check_verdict(i, v, data["tolerance"], data["confidence"], data.get("rule", 1))
        code = exit_code([verdict_from_dict(v) for v in data["verdicts"]])
        if code != data["exit_code"]:
            raise SchemaError("exit_code", f"{code}, as the verdicts give", data["exit_code"])

    def table(self, data: dict, fmt: str = "simple", tasks: bool = True) -> str:
        # here: the registry imports this module on its first lookup (docs/extending.md)
        from ..judge.ab import ab_table_of_file

        return ab_table_of_file(data, fmt)

    def count(self, data: dict) -> str:
        return f" with {len(data['verdicts'])} verdict{'s' if len(data['verdicts']) != 1 else ''}"

    def summary(self, data: dict, name: str, target: str) -> str:
        return f"A/B of {name} on {target}{self.count(data)}"


__all__ = ["AB_SCHEMA", "Ab", "AbFile"]
