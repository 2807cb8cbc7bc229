"""Provenance is never written by hand (issue 52 item 9): a result's commit comes from its own checkout or from an
explicit claim recorded as one (VLABENCH_GIT_SHA, `vlabench run --commit`), "unknown" when neither exists, and
every committed result under results/ reads as the harness wrote it (harness/stats/provenance_checks.py)."""

import json
from pathlib import Path

import pytest

import harness.ladder.runner
import harness.results
from harness.cli import main
from harness.results import provenance
from harness.stats.provenance_checks import GIT_SHA_FROM, provenance_problems

ROOT = Path(__file__).resolve().parent.parent

# The committed results that fail the check and stay under results/, each because a generated page, a scenario or
# a test reads it (moving it would change what they say). No other file may join this list: a result whose
# provenance was rewritten after its run leaves results/ (docs/history/hand-edited-results/README.md).
KNOWN_EXCEPTIONS = {
    "results/h200/pi05-beyond.json": "its fp8-rowwise rung (run 48ae10c6105a, commit e424882) was merged in by hand "
    "from results/h200/evidence/repeats/pi05-beyond-2026-12-04-rowwise-call-e424882.json (commit 4989f66) without that run's "
    "provenance in provenance_earlier; read by docs/results.md's generated block, scenarios/pi05-beyond.yaml "
    "(memory peaks) and tests/test_memory_plan.py",
    "results/h200/evidence/train-ladder-2026-12-02-dart/train-ladder.json": "git_sha rewritten by hand to the commit sent "
    "(git_sha_from a session-log sentence; local_git keeps what the copy's stale .git said); read by docs/results.md's "
    "generated block (harness/report/readme.py train_ladder_files)",
}

SHA_A, SHA_B, SHA_C = "a" * 40, "b" * 40, "c" * 40


def committed_results() -> list[Path]:
    return sorted((ROOT / "results").rglob("*.json"))


# ----------------------------------------------------------------------------- what provenance() writes


def test_provenance_without_a_checkout_or_a_claim_says_unknown(monkeypatch):
    monkeypatch.setattr(harness.results, "_git", lambda *args: None)
    monkeypatch.delenv("VLABENCH_GIT_SHA", raising=False)
    p = provenance(["x"])
    assert (p["git_sha"], p["git_sha_from"], p["dirty"]) == ("unknown", "unknown", None)
    assert "local_git" not in p and provenance_problems({"provenance": p, "rungs": []}) == []


def test_commit_argument_is_an_explicit_claim_over_the_environment_and_the_local_git(monkeypatch):
    monkeypatch.setattr(harness.results, "_git", lambda *args: SHA_B if args[0] == "rev-parse" else "")
    monkeypatch.setenv("VLABENCH_GIT_SHA", SHA_C)
    monkeypatch.setenv("VLABENCH_GIT_DIRTY", "0")
    p = provenance(["x"], commit=SHA_A)
    assert (p["git_sha"], p["git_sha_from"], p["dirty"]) == (SHA_A, "--commit", False)
    assert p["local_git"] == {"git_sha": SHA_B, "dirty": False}  # what the stale copy's .git said
    env = provenance(["x"])
    assert (env["git_sha"], env["git_sha_from"]) == (SHA_C, "VLABENCH_GIT_SHA")
    monkeypatch.delenv("VLABENCH_GIT_SHA")
    own = provenance(["x"])
    assert (own["git_sha"], own["git_sha_from"], own["dirty"]) == (SHA_B, "git", False) and "local_git" not in own


def test_every_source_provenance_writes_is_one_the_check_accepts(monkeypatch):
    monkeypatch.setattr(harness.results, "_git", lambda *args: None)
    monkeypatch.delenv("VLABENCH_GIT_SHA", raising=False)
    written = {provenance(["x"])["git_sha_from"], provenance(["x"], commit=SHA_A)["git_sha_from"]}
    monkeypatch.setenv("VLABENCH_GIT_SHA", SHA_A)
    written.add(provenance(["x"])["git_sha_from"])
    monkeypatch.setattr(harness.results, "_git", lambda *args: SHA_B if args[0] == "rev-parse" else "")
    monkeypatch.delenv("VLABENCH_GIT_SHA")
    written.add(provenance(["x"])["git_sha_from"])
    assert written == set(GIT_SHA_FROM)


def test_run_commit_is_checked_and_passed_to_the_run(tmp_path, monkeypatch, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: prov\nmodel: pi05\nworkload: {batch_size: 1, cameras: 2, text_tokens: 16, action_horizon: 4, "
        "warmup_steps: 1, timed_steps: 2, seed: 0, dtype: fp32}\n"
        "ladder:\n  - {name: community, options: {}}\ntargets:\n  cpu: {model_size: tiny}\n"
    )
    seen = {}

    class Reached(BaseException):
        pass

    def run_scenario(*args, **kwargs):
        seen.update(kwargs)
        raise Reached

    monkeypatch.setattr(harness.ladder.runner, "run_scenario", run_scenario)
    base = ["run", str(scenario), "--target", "cpu", "--out", str(tmp_path / "r.json")]
    assert main([*base, "--commit", "not-a-sha"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vlabench: error: --commit: expected a commit id") and "\n" not in err
    assert not seen
    with pytest.raises(Reached):
        main([*base, "--commit", "5a0a431"])
    assert seen["commit"] == "5a0a431"


# ----------------------------------------------------------------------------- the check's rule


def header(sha=SHA_A, run_id="run1", created="2026-01-01T00:00:00Z", source="VLABENCH_GIT_SHA", dirty=False):
    return {"git_sha": sha, "git_sha_from": source, "dirty": dirty, "created_at": created, "run_id": run_id}


def rung(name, prov):
    return {"name": name, "measured": {k: prov.get(k) for k in ("git_sha", "dirty", "created_at", "run_id")}}


def test_a_result_as_the_harness_writes_it_passes():
    now, before = header(), header(SHA_B, "run0", "2025-12-31T00:00:00Z", "git")
    result = {"provenance": now, "provenance_earlier": [before], "rungs": [rung("a", before), rung("b", now)]}
    result["rungs"][1]["repeats"] = [{"measured": rung("b", now)["measured"]}]
    assert provenance_problems(result) == []
    assert provenance_problems({"schema": "vlabench.result/1"}) == []  # nothing to check


def test_a_hand_written_source_fails():
    problems = provenance_problems({"provenance": header(source="session log: the commit sent"), "rungs": []})
    assert problems == [
        "provenance.git_sha_from: expected one of git, VLABENCH_GIT_SHA, --commit, unknown (what the harness "
        "writes), got 'session log: the commit sent'"
    ]
    earlier = {"provenance": header(), "provenance_earlier": [header(source=None)], "rungs": []}
    assert provenance_problems(earlier)[0].startswith("provenance_earlier[0].git_sha_from: expected one of")
    unknown = {"provenance": header(sha=SHA_A, source="unknown"), "rungs": []}
    assert provenance_problems(unknown) == [
        "provenance: git_sha_from 'unknown' with git_sha 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', dirty False"
    ]


def test_a_header_commit_rewritten_after_the_run_fails():
    measured = header(SHA_B, dirty=True)
    result = {"provenance": header(SHA_A), "rungs": [rung("community", measured)]}
    result["rungs"][0]["repeats"] = [{"measured": rung("community", measured)["measured"]}]
    assert provenance_problems(result) == [
        f"rungs[0] (community).measured.git_sha: expected '{SHA_A}' (the provenance of its run), got '{SHA_B}'",
        "rungs[0] (community).measured.dirty: expected False (the provenance of its run), got True",
        f"rungs[0] (community).repeats[0].measured.git_sha: expected '{SHA_A}' (the provenance of its run), "
        f"got '{SHA_B}'",
        "rungs[0] (community).repeats[0].measured.dirty: expected False (the provenance of its run), got True",
    ]


def test_a_rung_from_a_run_the_file_does_not_name_fails():
    other = header(SHA_C, "run9", "2026-01-02T00:00:00Z")
    result = {"provenance": header(), "provenance_earlier": [header(SHA_B, "run0")], "rungs": [rung("fp8", other)]}
    assert provenance_problems(result) == [
        f"rungs[0] (fp8).measured: run 'run9' (commit '{SHA_C}') is neither this file's run nor one in "
        "provenance_earlier (a rung merged by hand?)"
    ]
    result["provenance_earlier"][0]["run_id"] = "run9"  # the run is named, but with another commit
    assert provenance_problems(result)[0] == (
        f"rungs[0] (fp8).measured.git_sha: expected '{SHA_B}' (the provenance_earlier[0] of its run), got '{SHA_C}'"
    )


def test_results_from_before_run_ids_find_their_run_by_its_start():
    old, new = header(SHA_B, None, "2025-01-01T00:00:00Z"), header(SHA_A, None, "2025-01-02T00:00:00Z")
    result = {"provenance": new, "provenance_earlier": [old], "rungs": [rung("a", old), rung("b", new)]}
    assert provenance_problems(result) == []
    result["rungs"][0]["measured"]["git_sha"] = SHA_C
    assert len(provenance_problems(result)) == 1


# ----------------------------------------------------------------------------- every committed result


@pytest.mark.parametrize("path", committed_results(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_committed_result_provenance_is_as_the_harness_wrote_it(path):
    name = path.relative_to(ROOT).as_posix()
    problems = provenance_problems(json.loads(path.read_text()))
    if name in KNOWN_EXCEPTIONS:
        assert problems, f"{name} passes now: take it off KNOWN_EXCEPTIONS"
    else:
        assert problems == [], f"{name}: provenance written by hand (move it out of results/, never edit it)"


def test_every_known_exception_is_a_committed_result():
    assert all((ROOT / name).is_file() for name in KNOWN_EXCEPTIONS)
