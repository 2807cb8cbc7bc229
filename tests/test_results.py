import json
import math
import os

import pytest

from harness import results
from harness.results import SCHEMA, ResultError, ResultWriter, load_result, provenance

HEADER = {
    "scenario": {"name": "pi05-demo", "path": "scenarios/pi05-demo.yaml", "sha256": "ab"},
    "target": {"name": "cpu", "backend": "cpu", "device_name": "cpu", "device_count": 1},
    "provenance": {"git_sha": None, "dirty": None},
    "workload": {"model": "pi05", "model_size": "tiny", "batch_size": 2, "cameras": 2, "seed": 0},
}


def ok_rung(name, **extra):
    return {
        "name": name,
        "status": "ok",
        "reason": None,
        "options": {},
        "samples_per_s": 10.0,
        "step_times_s": [0.2, 0.2],
        "losses": [1.0, 0.9],
        **extra,
    }


def test_round_trip(tmp_path):
    path = tmp_path / "runs" / "r.json"
    writer = ResultWriter(path, HEADER)
    assert load_result(path) == {"schema": SCHEMA, **HEADER, "rungs": []}
    writer.append_rung(ok_rung("community", mfu=float("nan")))
    writer.append_rung({"name": "fp8", "status": "unsupported", "reason": "target lacks fp8"})
    writer.set("summary", {"speedup": float("inf"), "best": ("community",)})
    data = load_result(path)
    assert data == writer.data
    assert [r["name"] for r in data["rungs"]] == ["community", "fp8"]
    assert data["rungs"][0]["mfu"] is None  # NaN is not JSON
    assert data["summary"] == {"speedup": None, "best": ["community"]}
    assert path.read_text().startswith('{\n "schema": "vlabench.result/1"')


def test_file_is_valid_after_every_append(tmp_path):
    path = tmp_path / "r.json"
    writer = ResultWriter(path, HEADER)
    for i in range(3):
        writer.append_rung(ok_rung(f"rung-{i}"))
        assert len(json.loads(path.read_text())["rungs"]) == i + 1
    assert os.listdir(tmp_path) == ["r.json"]  # no temporary files left behind


def test_crash_mid_write_keeps_old_file(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    writer = ResultWriter(path, HEADER)
    writer.append_rung(ok_rung("community"))
    before = path.read_bytes()

    def crash(fd):
        raise OSError("disk on fire")

    monkeypatch.setattr(results.os, "fsync", crash)
    with pytest.raises(OSError, match="disk on fire"):
        writer.append_rung(ok_rung("second"))
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["r.json"]
    assert [r["name"] for r in writer.data["rungs"]] == ["community"]  # memory matches disk

    with pytest.raises(TypeError):  # not serialisable: fails before the disk is touched
        writer.append_rung(ok_rung("third", model=object()))
    assert path.read_bytes() == before


def test_append_rejects_unknown_status(tmp_path):
    writer = ResultWriter(tmp_path / "r.json", HEADER)
    with pytest.raises(ValueError, match="status must be one of ok, oom"):
        writer.append_rung({"name": "x", "status": "fine"})


def test_provenance():
    p = provenance(["vlabench", "run", "scenarios/a b.yaml"])
    assert p["command"] == "vlabench run 'scenarios/a b.yaml'"
    assert p["created_at"].endswith("Z") and "T" in p["created_at"]
    assert p["torch"] and p["python"] and p["hostname"]
    assert p["torch_npu"] is None
    assert p["dirty"] in (True, False, None)
    assert p["git_sha"] == "unknown" or len(p["git_sha"]) == 40
    json.dumps(p, allow_nan=False)


def test_provenance_takes_the_senders_commit_over_a_stale_local_git(monkeypatch):
    local = provenance(["x"])
    monkeypatch.setenv("VLABENCH_GIT_SHA", "a" * 40)
    monkeypatch.setenv("VLABENCH_GIT_DIRTY", "0")
    p = provenance(["x"])
    assert (p["git_sha"], p["git_sha_from"], p["dirty"]) == ("a" * 40, "VLABENCH_GIT_SHA", False)
    if local["git_sha"] is not None:  # a checkout: what its own git said is kept beside the sender's word
        assert p["local_git"] == {"git_sha": local["git_sha"], "dirty": local["dirty"]}
    monkeypatch.setenv("VLABENCH_GIT_DIRTY", "")
    assert provenance(["x"])["dirty"] is None  # not said: unknown, not clean


def write_json(tmp_path, data, name="r.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "change, key, expected",
    [
        (lambda d: d.update(schema="vlabench.result/0"), "schema", "one of vlabench.result/1"),
        (lambda d: d.pop("provenance"), "provenance", "a value"),
        (lambda d: d["scenario"].pop("name"), "scenario.name", "a value"),
        (lambda d: d["target"].update(name=""), "target.name", "a non-empty string"),
        (lambda d: d.update(rungs={}), "rungs", "a list of rung records"),
        (
            lambda d: d["rungs"][1].update(status="fast"),
            "rungs[1].status",
            "one of ok, oom, error, unsupported, skipped",
        ),
        (lambda d: d["rungs"][1].pop("name"), "rungs[1].name", "a value"),
        (lambda d: d["rungs"][0].pop("samples_per_s"), "rungs[0].samples_per_s", "a value (the rung is ok)"),
        (lambda d: d["rungs"][0].update(step_times_s=[]), "rungs[0].step_times_s", "a non-empty list of numbers"),
        (
            lambda d: d["rungs"][0].update(losses="1.0"),
            "rungs[0].losses",
            "a list of numbers (null for a non-finite loss) or null",
        ),
        (lambda d: d["rungs"][1].update(status="oom", reason=None), "rungs[1].reason", "a reason for status 'oom'"),
        # impossible numbers: a crash must never read as a regression (nor as a ZeroDivisionError)
        (lambda d: d["rungs"][0].update(step_times_s=[0.1, 0.0]), "rungs[0].step_times_s[1]", "a positive number"),
        (lambda d: d["rungs"][0].update(step_times_s=[-0.1]), "rungs[0].step_times_s[0]", "a positive number"),
        (
            lambda d: d["rungs"][0].update(samples_per_s=float("nan")),
            "rungs[0].samples_per_s",
            "a positive number or null",
        ),
        (lambda d: d["rungs"][0].update(samples_per_s=0), "rungs[0].samples_per_s", "a positive number or null"),
        (lambda d: d["rungs"][0].update(peak_memory_gib=-1.0), "rungs[0].peak_memory_gib", "a number >= 0 or null"),
        (lambda d: d["workload"].update(batch_size=0), "workload.batch_size", "a positive integer or null"),
        (
            lambda d: d.update(success_rate={"s": {"successes": 3, "trials": 2}}),
            "success_rate.s",
            "successes <= trials",
        ),
    ],
)
def test_validation_errors(tmp_path, change, key, expected):
    data = {"schema": SCHEMA, **json.loads(json.dumps(HEADER)), "rungs": [ok_rung("a"), ok_rung("b")]}
    load_result(write_json(tmp_path, data, "good.json"))
    change(data)
    path = write_json(tmp_path, data)
    with pytest.raises(ResultError) as info:
        load_result(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {key}: expected {expected}, got ")
    assert "\n" not in message


def test_unreadable_files(tmp_path):
    with pytest.raises(ResultError, match="expected an existing result file"):
        load_result(tmp_path / "missing.json")
    path = tmp_path / "bad.json"
    path.write_text('{"schema":\n')
    with pytest.raises(ResultError, match=r"bad.json: line 2: expected valid JSON"):
        load_result(path)
    with pytest.raises(ResultError, match=r"\(top level\): expected a JSON object, got list"):
        load_result(write_json(tmp_path, [1]))


def test_nan_loss_is_null_not_invalid(tmp_path):
    path = tmp_path / "r.json"
    ResultWriter(path, HEADER).append_rung(ok_rung("a", losses=[1.0, math.nan]))
    assert load_result(path)["rungs"][0]["losses"] == [1.0, None]


@pytest.mark.parametrize(
    "command",
    [
        ["show"],
        ["gate", "--baseline", "GOOD"],
        ["compare"],
        ["report", "--out", "OUT"],
        ["record", "--results-dir", "OUT"],
    ],
)
def test_every_command_refuses_impossible_numbers_in_one_line(tmp_path, capsys, command):
    from harness.cli import main

    good = {"schema": SCHEMA, **json.loads(json.dumps(HEADER)), "rungs": [ok_rung("a")]}
    bad = json.loads(json.dumps(good))
    bad["rungs"][0]["step_times_s"] = [0.1, 0.0, float("nan")]
    good_path, bad_path = write_json(tmp_path, good, "good.json"), write_json(tmp_path, bad, "bad.json")
    args = [str(good_path) if a == "GOOD" else str(tmp_path / "out") if a == "OUT" else a for a in command]
    assert main([args[0], str(bad_path), *args[1:]]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"vlabench: error: {bad_path}: rungs[0].step_times_s[1]: expected a positive number, got number 0.0"
