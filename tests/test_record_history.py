"""`vlabench record` keeps the baseline it replaces as numbered history (issue 53 item 5): the old file, byte for
byte, at results/<target>/history/<scenario>/NNNN-<commit>.json; a failed write leaves the old baseline and no
history; nothing escapes --results-dir; show, compare and the site read history files as results."""

import json
import shutil
from pathlib import Path

import pytest
from cli_errors import files_under, one_line_error

import harness.judge.gates
from harness.cli import main
from harness.judge.gates import record
from harness.report.site import load_site_data, rung_history
from harness.stats.timing import summarize_steps

ROOT = Path(__file__).resolve().parent.parent
LADDER = ROOT / "tests/fixtures/ladder-h200.json"  # a ladder result of pi05-loongforge on h200
STEPS = [0.1, 0.11, 0.1, 0.09, 0.1, 0.1]


def result(sha: str, rate: float = 1.0, created: str = "2026-11-29T00:00:00Z") -> dict:
    steps = [t / rate for t in STEPS]
    return {
        "schema": "vlabench.result/1",
        "scenario": {"name": "hist-demo", "path": "s.yaml", "sha256": "ab"},
        "target": {"name": "cpu", "backend": "cpu", "device_name": "cpu device", "device_count": 1},
        "provenance": {
            "git_sha": sha,
            "dirty": False,
            "python": "3.11",
            "torch": "2.13.0",
            "created_at": created,
            "command": "test",
        },
        "workload": {"model": "pi05", "model_size": "tiny", "batch_size": 2, "dtype": "fp32"},
        "rungs": [
            {
                "name": "community",
                "status": "ok",
                "reason": None,
                "options": {"x": 1},
                "step_times_s": steps,
                **summarize_steps(steps, 2),
                "losses": [1.0] * len(steps),
                "peak_memory_gib": 1.0,
                "peak_memory_kind": "peak allocated by torch",
                "loss_parity": {"max_rel_diff": 0.0, "tolerance": 0.01, "pass": True},
            }
        ],
    }


def write(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


SHA_A, SHA_B, SHA_C = "a1" * 20, "b2" * 20, "c3" * 20


def test_recording_again_keeps_the_replaced_baseline_byte_for_byte_numbered(tmp_path, capsys):
    results = tmp_path / "results"
    first = write(tmp_path / "first.json", result(SHA_A))
    second = write(tmp_path / "second.json", result(SHA_B, rate=1.1))
    third = write(tmp_path / "third.json", result(SHA_C, rate=1.2))
    baseline = results / "cpu" / "hist-demo.json"
    history = results / "cpu" / "history" / "hist-demo"

    assert main(["record", str(first), "--results-dir", str(results)]) == 0
    assert baseline.read_bytes() == first.read_bytes() and not history.exists()  # nothing replaced yet
    capsys.readouterr()

    assert main(["record", str(second), "--results-dir", str(results)]) == 0
    kept = history / f"0001-{SHA_A[:7]}.json"
    assert kept.read_bytes() == first.read_bytes() and baseline.read_bytes() == second.read_bytes()
    assert str(kept) in capsys.readouterr().out

    assert record(third, results) == (baseline, history / f"0002-{SHA_B[:7]}.json")
    assert (history / f"0002-{SHA_B[:7]}.json").read_bytes() == second.read_bytes()
    assert kept.read_bytes() == first.read_bytes() and baseline.read_bytes() == third.read_bytes()
    assert sorted(p.name for p in history.iterdir()) == [f"0001-{SHA_A[:7]}.json", f"0002-{SHA_B[:7]}.json"]

    # the baseline's own bytes again: nothing is replaced, nothing kept
    assert record(write(tmp_path / "again.json", json.loads(third.read_text())), results) == (baseline, None)
    assert len(list(history.iterdir())) == 2

    # an older baseline put back: the one it replaces is the next number, the old number stays
    assert record(kept, results) == (baseline, history / f"0003-{SHA_C[:7]}.json")
    assert baseline.read_bytes() == first.read_bytes() and kept.read_bytes() == first.read_bytes()


def test_a_number_already_taken_is_never_overwritten(tmp_path):
    results = tmp_path / "results"
    record(write(tmp_path / "a.json", result(SHA_A)), results)
    history = results / "cpu" / "history" / "hist-demo"
    history.mkdir(parents=True)
    taken = history / f"0001-{SHA_A[:7]}.json"
    taken.write_text("kept by hand\n")  # e.g. a history file committed from another checkout
    (history / "notes.txt").write_text("not a history file\n")
    assert record(write(tmp_path / "b.json", result(SHA_B, rate=1.1)), results)[1] == history / f"0002-{SHA_A[:7]}.json"
    assert taken.read_text() == "kept by hand\n"


def test_a_commit_that_is_not_a_sha_names_the_history_file_unknown(tmp_path):
    results = tmp_path / "results"
    record(write(tmp_path / "a.json", result("unknown")), results)
    kept = record(write(tmp_path / "b.json", result(SHA_B, rate=1.1)), results)[1]
    assert kept.name == "0001-unknown.json"


def test_a_failed_write_leaves_the_old_baseline_in_place_and_no_history(tmp_path, monkeypatch):
    results = tmp_path / "results"
    first = write(tmp_path / "first.json", result(SHA_A))
    record(first, results)
    baseline = results / "cpu" / "hist-demo.json"

    def full_disk(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(harness.judge.gates, "write_text_atomic", full_disk)
    with pytest.raises(OSError, match="No space left"):
        record(write(tmp_path / "second.json", result(SHA_B, rate=1.1)), results)
    assert baseline.read_bytes() == first.read_bytes()
    assert list((results / "cpu" / "history" / "hist-demo").iterdir()) == []  # not history while still the baseline
    monkeypatch.undo()
    assert record(tmp_path / "second.json", results)[1].name == f"0001-{SHA_A[:7]}.json"  # the number is free


def test_a_refused_result_leaves_the_baseline_and_its_history_alone(tmp_path, capsys):
    results = tmp_path / "results"
    first = write(tmp_path / "first.json", result(SHA_A))
    record(first, results)
    broken = result(SHA_B)
    broken["rungs"][0]["loss_parity"] = {"max_rel_diff": 0.5, "tolerance": 0.01, "pass": False, "against": "ref"}
    before = files_under(results)
    one_line_error(capsys, ["record", write(tmp_path / "broken.json", broken), "--results-dir", results])
    assert files_under(results) == before and (results / "cpu" / "hist-demo.json").read_bytes() == first.read_bytes()


def test_history_cannot_escape_the_results_dir_through_a_planted_link(tmp_path, capsys):
    results, elsewhere = tmp_path / "results", tmp_path / "elsewhere"
    first = write(tmp_path / "first.json", result(SHA_A))
    record(first, results)
    elsewhere.mkdir()
    (results / "cpu" / "history").symlink_to(elsewhere)  # what it leads to is not under --results-dir
    err = one_line_error(capsys, ["record", write(tmp_path / "b.json", result(SHA_B, 1.1)), "--results-dir", results])
    assert "a path inside" in err and not any(elsewhere.iterdir())
    assert (results / "cpu" / "hist-demo.json").read_bytes() == first.read_bytes()


@pytest.mark.parametrize("key, name", [("scenario", "../../victim"), ("target", "../cpu"), ("scenario", "/tmp/x")])
def test_a_hostile_name_never_chooses_a_history_path(tmp_path, capsys, key, name):
    results = tmp_path / "results"
    record(write(tmp_path / "first.json", result(SHA_A)), results)
    hostile = result(SHA_B, 1.1)
    hostile[key]["name"] = name
    path = write(tmp_path / "hostile.json", hostile)
    before = files_under(tmp_path)
    err = one_line_error(capsys, ["record", path, "--results-dir", results, "--force"])
    assert f"{key}.name" in err and "plain name" in err and files_under(tmp_path) == before


def test_a_scenario_named_history_keeps_its_baseline_beside_the_history_folder(tmp_path):
    """A plain name, `history` included, is a baseline file (results/cpu/history.json); its own history is a
    folder of its own (results/cpu/history/history/), never another scenario's."""
    results = tmp_path / "results"
    record(write(tmp_path / "first.json", result(SHA_A)), results)
    named = [result(sha, rate) for sha, rate in ((SHA_B, 1.1), (SHA_C, 1.2))]
    for data in named:
        data["scenario"]["name"] = "history"
    record(write(tmp_path / "h1.json", named[0]), results)
    kept = record(write(tmp_path / "h2.json", named[1]), results)[1]
    assert kept == results / "cpu" / "history" / "history" / f"0001-{SHA_B[:7]}.json"
    assert (results / "cpu" / "history.json").read_bytes() == (tmp_path / "h2.json").read_bytes()
    assert (results / "cpu" / "hist-demo.json").read_bytes() == (tmp_path / "first.json").read_bytes()


def test_show_compare_and_the_site_read_history_files(tmp_path, capsys):
    """A replaced baseline stays a result: `show` and `compare` read it, and the site's rung history lists its
    rungs beside the baseline's (the site reads every result under results/<target>/, history/ included)."""
    repo = tmp_path / "repo"
    (repo / "results").mkdir(parents=True)
    (repo / "results" / "published").symlink_to(ROOT / "results" / "published")
    newer = json.loads(LADDER.read_text())
    for rec in newer["rungs"]:
        if rec.get("measured"):
            rec["measured"] = {**rec["measured"], "created_at": "2027-01-01T00:00:00Z"}
    newer["provenance"]["created_at"] = "2027-01-01T00:00:00Z"
    shutil.copy(LADDER, tmp_path / "older.json")  # the fixture's own bytes
    record(tmp_path / "older.json", repo / "results")
    kept = record(write(tmp_path / "newer.json", newer), repo / "results")[1]
    assert kept is not None and kept.read_bytes() == LADDER.read_bytes()

    assert main(["show", str(kept)]) == 0 and "prune-empty-cameras" in capsys.readouterr().out
    assert main(["compare", str(kept), str(repo / "results" / "h200" / "pi05-loongforge.json")]) == 0
    capsys.readouterr()

    data = load_site_data(repo)
    history_path = kept.relative_to(repo).as_posix()
    assert history_path in [p for p, _ in data.ladders]
    baseline = next(r for p, r in data.results if p == "results/h200/pi05-loongforge.json")
    rows = rung_history(baseline, data.ladders)
    assert any(row[-1] == history_path for row in rows)
