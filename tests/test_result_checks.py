"""Cross-checks on load (harness/stats/result_checks.py): every committed result loads, and a copy whose figure does
not follow from its own stored data is refused in one line by every command, naming the key."""

import json
import statistics
from pathlib import Path

import pytest

from harness.cli import main
from harness.results import SCHEMA, load_result
from harness.stats.timing import summarize_steps

ROOT = Path(__file__).resolve().parent.parent
LADDER = ROOT / "results" / "h200" / "pi05-loongforge.json"
DDP2 = ROOT / "results" / "h200" / "gr00t-loongforge-ddp2.json"
EVAL = ROOT / "results" / "cpu" / "libero-goal-expert.json"


def committed_results() -> list[Path]:
    files = sorted([*ROOT.glob("results/**/*.json"), *ROOT.glob("tests/fixtures/*.json")])
    return [p for p in files if json.loads(p.read_text()).get("schema") == SCHEMA]


def test_every_committed_result_and_fixture_loads():
    files = committed_results()
    assert len(files) >= 30  # the glob found the results, not nothing
    for path in files:
        load_result(path)  # raises a one-line ResultError naming the file


def rung(data: dict, name: str) -> dict:
    return next(r for r in data["rungs"] if r["name"] == name)


def refused(tmp_path, capsys, original: Path, data: dict) -> str:
    """The one line `show` prints for a changed copy of `original`; `gate` against the original says the same."""
    path = tmp_path / f"changed-{original.name}"
    path.write_text(json.dumps(data))
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert main(["gate", str(path), "--baseline", str(original)]) == 2
    assert capsys.readouterr().err == err and len(err.splitlines()) == 1
    prefix = f"vlabench: error: {path}: "
    assert err.startswith(prefix)
    return err.strip().removeprefix(prefix)


def test_fp8_at_one_and_a_half_times_its_own_steps_is_refused(tmp_path, capsys):
    data = json.loads(LADDER.read_text())
    fp8 = rung(data, "fp8")
    expected = statistics.median(
        summarize_steps(r["step_times_s"], data["workload"]["batch_size"])["samples_per_s"] for r in fp8["repeats"]
    )
    fp8["samples_per_s"] *= 1.5
    assert refused(tmp_path, capsys, LADDER, data) == (
        f"rungs.fp8.samples_per_s: expected {expected:.6g} (the median of 3 ok repeats' samples_per_s, within 1%), "
        f"got {fp8['samples_per_s']:.6g}"
    )
    # and each repeat's own figure follows from its own steps
    fp8 = rung(data, "fp8")
    fp8["samples_per_s"] /= 1.5
    fp8["repeats"][1]["samples_per_s"] *= 1.5
    assert refused(tmp_path, capsys, LADDER, data).startswith("rungs.fp8.repeats[1].samples_per_s: expected ")


def scale(key: str, factor: float, name: str = "compile-per-layer"):
    def change(data):
        rung(data, name)[key] *= factor

    return change


def first_rung_failed(data):
    data["rungs"][0].update(status="oom", reason="CUDA out of memory")


TAMPERED = [
    (LADDER, scale("samples_per_s", 0.98), "rungs.compile-per-layer.samples_per_s"),
    (LADDER, scale("samples_per_s_p10", 1.02), "rungs.compile-per-layer.samples_per_s_p10"),
    (LADDER, scale("samples_per_s_p90", 0.9), "rungs.compile-per-layer.samples_per_s_p90"),
    (LADDER, scale("step_time_s", 1.1, "flex-attention"), "rungs.flex-attention.step_time_s"),
    (LADDER, scale("speedup_vs_baseline", 1.05), "rungs.compile-per-layer.speedup_vs_baseline"),
    (LADDER, scale("speedup_vs_previous", 0.95), "rungs.compile-per-layer.speedup_vs_previous"),
    # the baseline rung failed: no speedup over it can be stated
    (LADDER, first_rung_failed, "rungs.prune-empty-cameras.speedup_vs_baseline"),
    # two processes: a step carries both processes' batches, so one process's batch is half the rate
    (DDP2, lambda d: d.update(nproc=1), "rungs.community.samples_per_s"),
    (DDP2, scale("samples_per_s_p90", 1.05, "fp8-dit"), "rungs.fp8-dit.samples_per_s_p90"),
]


@pytest.mark.parametrize("original, change, key", TAMPERED, ids=[k for _, _, k in TAMPERED])
def test_a_figure_off_its_stored_data_is_refused(original, change, key, tmp_path, capsys):
    data = json.loads(original.read_text())
    change(data)
    assert refused(tmp_path, capsys, original, data).startswith(f"{key}: expected ")


def flip_episode(task: int):
    def change(data):
        episode = next(e for e in data["episodes"] if e["task"] == task)
        episode["success"] = not episode["success"]

    return change


def entry(name: str, **values):
    def change(data):
        data["success_rate"][name].update(values)

    return change


EVAL_TAMPERED = [
    (flip_episode(4), "success_rate.libero_goal.successes"),
    (lambda d: d["episodes"].pop(), "success_rate.libero_goal.trials"),
    (entry("libero_goal/6", trials=51), "success_rate.libero_goal/6.trials"),
    (entry("libero_goal/8", successes=0), "success_rate.libero_goal/8.successes"),
    (entry("libero_goal/1", rate=0.5), "success_rate.libero_goal/1.rate"),
    (lambda d: d["episodes"].__setitem__(0, {**d["episodes"][0], "task": 9}), "success_rate.libero_goal/1.trials"),
]


@pytest.mark.parametrize("change, key", EVAL_TAMPERED, ids=[k for _, k in EVAL_TAMPERED])
def test_success_counts_off_the_stored_episodes_are_refused(change, key, tmp_path, capsys):
    data = json.loads(EVAL.read_text())
    change(data)
    message = refused(tmp_path, capsys, EVAL, data)
    assert message.startswith(f"{key}: expected ") and "(from the stored episodes" in message


@pytest.mark.parametrize("original", [LADDER, DDP2, EVAL], ids=lambda p: p.name)
def test_untampered_results_show_and_gate(original, capsys):
    assert main(["show", str(original)]) == 0
    assert main(["gate", str(original), "--baseline", str(original)]) == 0
    assert capsys.readouterr().err == ""


# A rung measured in 3 processes (repeats): uneven step counts, so the median over repeats (the rung's
# figure) differs from the median of the pooled steps.
BATCH = 8
REPEAT_STEPS = (
    (0.100, 0.101, 0.099, 0.102, 0.100, 0.098, 0.101, 0.100),
    (0.110, 0.111, 0.109, 0.112),
    (0.130, 0.131, 0.129, 0.128),
)


def repeats_result(failed_repeat: bool = False) -> dict:
    repeats = [{"status": "ok", **summarize_steps(s, BATCH), "step_times_s": list(s)} for s in REPEAT_STEPS]
    if failed_repeat:
        repeats.insert(1, {"status": "error", "reason": "process died"})
    pooled = [t for s in REPEAT_STEPS for t in s]
    base = {"status": "ok", **summarize_steps(REPEAT_STEPS[0], BATCH), "step_times_s": list(REPEAT_STEPS[0])}
    rungs = [
        {**base, "name": "eager", "speedup_vs_baseline": 1.0, "speedup_vs_previous": None},
        {
            **summarize_steps(pooled, BATCH),
            "name": "graphs",
            "status": "ok",
            "samples_per_s": statistics.median(r["samples_per_s"] for r in repeats if r["status"] == "ok"),
            "step_times_s": pooled,
            "repeats": repeats,
        },
    ]
    for r in rungs:
        r.update(reason=None, options={}, losses=[1.0] * len(r["step_times_s"]), peak_memory_gib=1.0)
    rungs[1]["speedup_vs_baseline"] = rungs[1]["speedup_vs_previous"] = (
        rungs[1]["samples_per_s"] / rungs[0]["samples_per_s"]
    )
    return {
        "schema": SCHEMA,
        "scenario": {"name": "repeats-demo", "path": "s.yaml", "sha256": "ab"},
        "target": {"name": "cpu", "backend": "cpu", "device_name": "cpu", "device_count": 1},
        "provenance": {
            "git_sha": "abc",
            "git_sha_from": "git",
            "dirty": False,
            "torch": "2.13.0",
            "created_at": "2026-11-29T00:00:00Z",
        },
        "workload": {"model": "pi05", "model_size": "tiny", "batch_size": BATCH, "dtype": "fp32"},
        "nproc": 1,
        "rungs": rungs,
    }


def graphs(data: dict) -> dict:
    return rung(data, "graphs")


def test_the_repeats_format_follows_from_its_repeats(tmp_path, capsys):
    data = repeats_result()
    pooled_median = statistics.median(BATCH / t for t in graphs(data)["step_times_s"])
    assert abs(pooled_median / graphs(data)["samples_per_s"] - 1) > 0.02  # the two medians tell apart
    for name, figures in (("r.json", data), ("failed-repeat.json", repeats_result(failed_repeat=True))):
        path = tmp_path / name
        path.write_text(json.dumps(figures))
        assert main(["show", str(path)]) == 0
        # its repeats spread 13% between processes: even against itself the interval reaches beyond twice the
        # tolerance, so the gate cannot call it a pass (exit 3, inconclusive)
        assert main(["gate", str(path), "--baseline", str(path)]) == 3
        captured = capsys.readouterr()
        assert "beyond twice the tolerance, so a pass could hide a regression" in captured.out and captured.err == ""


def drop_repeat_steps(data):
    graphs(data)["step_times_s"] = graphs(data)["step_times_s"][:-4]


REPEATS_TAMPERED = [
    # the median of the pooled steps is not the rung's figure: the median over the repeats is
    (lambda d: graphs(d).update(samples_per_s=statistics.median(BATCH / t for t in graphs(d)["step_times_s"]))),
    (lambda d: graphs(d)["repeats"][1].update(samples_per_s=graphs(d)["repeats"][1]["samples_per_s"] * 1.05)),
    (lambda d: graphs(d)["repeats"][2].update(samples_per_s_p10=graphs(d)["repeats"][2]["samples_per_s_p10"] * 0.9)),
    (lambda d: graphs(d).update(samples_per_s_p90=graphs(d)["samples_per_s_p90"] * 1.03)),
    drop_repeat_steps,
    (lambda d: [r.update(status="oom", reason="out of memory") for r in graphs(d)["repeats"]]),
    (lambda d: graphs(d).update(speedup_vs_previous=graphs(d)["speedup_vs_previous"] * 1.1)),
]
REPEATS_KEYS = [
    "rungs.graphs.samples_per_s",
    "rungs.graphs.repeats[1].samples_per_s",
    "rungs.graphs.repeats[2].samples_per_s_p10",
    "rungs.graphs.samples_per_s_p90",
    "rungs.graphs.step_times_s",
    "rungs.graphs.repeats",
    "rungs.graphs.speedup_vs_previous",
]


@pytest.mark.parametrize("change, key", list(zip(REPEATS_TAMPERED, REPEATS_KEYS)), ids=REPEATS_KEYS)
def test_a_tampered_repeats_record_is_refused(change, key, tmp_path, capsys):
    original = tmp_path / "original.json"
    original.write_text(json.dumps(repeats_result()))
    data = repeats_result()
    change(data)
    assert refused(tmp_path, capsys, original, data).startswith(f"{key}: expected ")


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
def test_every_command_refuses_a_figure_off_its_data(command, tmp_path, capsys):
    data = json.loads(LADDER.read_text())
    rung(data, "fp8")["samples_per_s"] *= 1.5
    path = tmp_path / "fp8-x1.5.json"
    path.write_text(json.dumps(data))
    args = [str(LADDER) if a == "GOOD" else str(tmp_path / "out") if a == "OUT" else a for a in command]
    assert main([args[0], str(path), *args[1:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vlabench: error: {path}: rungs.fp8.samples_per_s: expected ") and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


SCHEMA_BROKEN = [
    (lambda d: graphs(d)["repeats"][0]["step_times_s"].__setitem__(0, 0.0), "rungs[1].repeats[0].step_times_s[0]"),
    (lambda d: graphs(d)["repeats"][2].pop("samples_per_s"), "rungs[1].repeats[2].samples_per_s"),
    (lambda d: graphs(d).update(speedup_vs_baseline="1.2x"), "rungs[1].speedup_vs_baseline"),
]


@pytest.mark.parametrize("change, key", SCHEMA_BROKEN, ids=[k for _, k in SCHEMA_BROKEN])
def test_malformed_repeats_and_speedups_are_refused_by_the_schema(change, key, tmp_path, capsys):
    data = repeats_result()
    change(data)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vlabench: error: {path}: {key}: expected ") and len(err.splitlines()) == 1


def test_a_malformed_episode_is_refused_by_the_schema(tmp_path, capsys):
    data = json.loads(EVAL.read_text())
    del data["episodes"][3]["suite"]
    path = tmp_path / "e.json"
    path.write_text(json.dumps(data))
    assert main(["show", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"vlabench: error: {path}: episodes[3].suite: expected a value")
