"""`vlabench eval --stop-after`: a suite split over several time-limited runs. A run stops handing out
episodes once its time is up, records the stop, exits 0 and prints the command that continues; the runs that
continue it keep every earlier run's throughput and add the whole suite's."""

import json
import os
import shlex
from pathlib import Path

import pytest

from harness.cli import main
from harness.commands.eval import continue_command
from harness.eval import sim
from harness.eval.runner import throughput_total
from harness.report.report import eval_parts_line

REPO = Path(__file__).resolve().parent.parent
SHARED_ASSETS = REPO.parent / "shared" / "libero-assets" / "libero-assets-spatial-goal.tar.xz"
WAIT_AND_STEPS = 10 + 5  # env steps of a noop episode: the protocol's 10 wait steps, then --max-steps 5


def _assets() -> str | None:
    return os.environ.get(sim.ASSETS_ENV) or (str(SHARED_ASSETS) if SHARED_ASSETS.exists() else None)


_missing = sim.missing_packages()
needs_sim = pytest.mark.skipif(bool(_missing), reason=f"needs the sim extra; missing: {', '.join(_missing)}")
needs_assets = pytest.mark.skipif(_assets() is None, reason=f"needs LIBERO assets: set {sim.ASSETS_ENV}")


def _continue_argv(stdout: str) -> list[str]:
    """The arguments of the printed continue command (without the leading `vlabench`)."""
    (line,) = [line for line in stdout.splitlines() if "continue with: " in line]
    argv = shlex.split(line.split("continue with: ", 1)[1])
    assert argv[0] == "vlabench"
    return argv[1:]


@pytest.mark.slow  # each run starts a worker that builds a MuJoCo scene: seconds on a CPU
@needs_sim
@needs_assets
def test_a_stopped_suite_continues_with_resume_and_keeps_every_parts_throughput(tmp_path, capsys):
    out = tmp_path / "eval.json"
    # One worker, a limit already past after the first hand-out: each run finishes exactly one episode.
    argv = ["eval", "--suite", "libero_goal", "--tasks", "1", "--trials", "3", "--policy", "noop", "--sim-workers", "1"]
    argv += ["--max-steps", "5", "--assets", _assets(), "--stop-after", "0.001", "--out", str(out)]

    assert main(argv) == 0
    stdout = capsys.readouterr().out
    first = json.loads(out.read_text())
    assert [e["trial"] for e in first["episodes"]] == [0] and first["episodes"][0]["status"] == "ok"
    assert first["throughput"]["stopped_early"] == {"after_s": 0.001, "episodes_left": 2}
    assert first["throughput"]["episodes"] == 1 and first["throughput"]["env_steps"] == WAIT_AND_STEPS
    assert "throughput_parts" not in first and "throughput_total" not in first  # one run: nothing to add up
    assert "with 2 episodes left" in stdout
    again = _continue_argv(stdout)
    assert again[-3:] == ["--out", str(out), "--resume"] and "--stop-after" in again

    assert main(again) == 0  # the second run: one more episode, one left
    second_out = capsys.readouterr().out
    second = json.loads(out.read_text())
    assert second["throughput"]["stopped_early"]["episodes_left"] == 1
    assert second["throughput_parts"] == [first["throughput"]]
    assert _continue_argv(second_out) == again

    assert main(again) == 0  # the third run finishes the suite and stops for nothing
    third_out = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert sorted(e["trial"] for e in result["episodes"]) == [0, 1, 2]
    assert all(e["status"] == "ok" for e in result["episodes"])
    assert result["success_rate"]["libero_goal"]["trials"] == 3
    assert "stopped_early" not in result["throughput"] and "continue with" not in third_out
    parts = result["throughput_parts"]
    assert parts == [first["throughput"], second["throughput"]]  # oldest first, each whole
    everything = [*parts, result["throughput"]]
    total = result["throughput_total"]
    assert total["parts"] == 3 and total["episodes"] == 3 and total["env_steps"] == 3 * WAIT_AND_STEPS
    assert total["wall_s"] == pytest.approx(sum(p["wall_s"] for p in everything))
    assert total["env_steps_per_s"] == pytest.approx(total["env_steps"] / total["wall_s"])
    assert f"all 3 runs together (--resume): 3 episodes, {3 * WAIT_AND_STEPS} env steps" in third_out


@pytest.mark.parametrize("value", ["0", "-5", "soon", "nan", "inf"])
def test_a_bad_stop_after_is_a_one_line_error(value, capsys):
    code = main(["eval", "--suite", "libero_goal", "--policy", "noop", "--stop-after", value])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err == f"vlabench: error: --stop-after: expected a positive number of seconds like 3600, got {value!r}"


def test_the_continue_command_resumes_into_the_same_file():
    argv = ["eval", "--suite", "libero_goal", "--out=old.json", "--resume", "--stop-after", "600", "--out", "x y"]
    assert continue_command(argv, "runs/x y.json") == (
        "vlabench eval --suite libero_goal --stop-after 600 --out 'runs/x y.json' --resume"
    )


def test_totals_add_up_the_parts_and_the_table_shows_them():
    parts = [
        {"wall_s": 10.0, "episodes": 4, "env_steps": 100},
        {"wall_s": 30.0, "episodes": 6, "env_steps": 300, "env_steps_per_s": 10.0},
    ]
    total = throughput_total(parts)
    assert total == {"parts": 2, "wall_s": 40.0, "episodes": 10, "env_steps": 400, "env_steps_per_s": 10.0}
    assert eval_parts_line({"throughput_total": total}) == (
        "all 2 runs together (--resume): 10 episodes, 400 env steps in 40.0 s = 10.0 env steps/s"
    )
    assert eval_parts_line({"throughput_total": throughput_total(parts[:1])}) is None  # one run: its row says it all
    assert eval_parts_line({}) is None
