"""Rung processes can always be stopped: the deadline holds while a child prints nothing, the whole process
group (torchrun and every rank) is ended, and an interruption keeps every finished rung."""

import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from harness.ladder.processes import run_group
from harness.ladder.runner import run_rung_process, run_scenario
from harness.machine.hardware import get_target
from harness.results import load_result
from harness.scenario import load_scenario
from harness.spec import scenario_spec

SCENARIO = """
name: hang-test
model: pi05
workload: {batch_size: 1, cameras: 2, text_tokens: 8, action_horizon: 4, warmup_steps: 1, timed_steps: 2,
           seed: 0, dtype: fp32}
ladder:
  - {name: community, options: {camera_slots: 3}}
  - {name: prune, options: {camera_slots: auto}}
targets:
  cpu: {model_size: tiny}
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers signal 0 until its parent reaps it; it runs nothing
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def hanging_site(tmp_path, when: str = "True") -> Path:
    """A sitecustomize that makes every Python process started with it on its path (where `when` holds) write
    its pid and then sleep silently: a rung stuck before it prints anything, found by the real runner path."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        textwrap.dedent(f"""
        import os, time
        if {when}:
            # written under another name and renamed: a reader never sees an empty pid file
            part = os.path.join({str(tmp_path)!r}, f"part-{{os.getpid()}}")
            with open(part, "w") as f:
                f.write(str(os.getpid()))
            os.replace(part, os.path.join({str(tmp_path)!r}, f"pid-{{os.getpid()}}"))
            time.sleep(600)
    """)
    )
    return site


def pids(tmp_path) -> list[int]:
    return [int(p.read_text()) for p in tmp_path.glob("pid-*")]


def spec_for(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    scenario = load_scenario(path)
    return scenario, scenario_spec(scenario, get_target("cpu"), scenario.ladder[0])


# The children below would sleep 600 s: a deadline that did not hold would keep a test waiting that long. The
# upper bounds on wall time are that generous (HUNG_S) so that a machine kept busy by other processes, which
# slows starting and ending processes, cannot fail them; the lower bounds (the deadline and grace period were
# waited out) hold on any machine.
HUNG_S = 120.0


def test_deadline_holds_for_a_silent_child_and_nothing_is_left():
    start = time.monotonic()
    done = run_group(
        [sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(600)"],
        dict(os.environ),
        lambda _: None,
        timeout_s=1.5,
    )
    wall = time.monotonic() - start
    assert done.timed_out and done.returncode is None and 1.5 <= wall < HUNG_S
    assert not alive(int(done.tail[0]))


def test_a_child_ignoring_sigterm_is_killed_after_the_grace_period():
    code = "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(os.getpid(), flush=True); time.sleep(600)"
    start = time.monotonic()
    done = run_group([sys.executable, "-c", code], dict(os.environ), lambda _: None, timeout_s=1.0, grace_s=1.0)
    # SIGTERM at the deadline, SIGKILL after the grace period: both waited out, and it did not run its 600 s
    assert done.timed_out and 1.0 + 1.0 <= time.monotonic() - start < HUNG_S
    assert not alive(int(done.tail[0]))


def test_silent_rung_times_out(tmp_path):
    _, spec = spec_for(tmp_path)
    site = hanging_site(tmp_path)
    start = time.monotonic()
    rec = run_rung_process(spec, lambda _: None, 3.0, env={"PYTHONPATH": str(site)})
    assert 3.0 <= time.monotonic() - start < HUNG_S  # the deadline held, though the rung printed nothing
    assert rec["status"] == "error" and rec["reason"].startswith("timed out after 3s")
    assert pids(tmp_path) and not any(alive(p) for p in pids(tmp_path))


@pytest.mark.slow
def test_silent_ranks_under_torchrun_are_all_ended(tmp_path):
    """`--nproc 2`: torchrun starts two ranks that hang silently; at the deadline every one of them is gone."""
    _, spec = spec_for(tmp_path)
    site = hanging_site(tmp_path, when="'LOCAL_RANK' in os.environ")  # the ranks, not torchrun itself
    start = time.monotonic()
    rec = run_rung_process(spec, lambda _: None, 12.0, env={"PYTHONPATH": str(site)}, nproc=2)
    wall = time.monotonic() - start
    assert rec["status"] == "error" and "timed out" in rec["reason"]
    assert 12.0 <= wall < HUNG_S
    assert len(pids(tmp_path)) == 2, "both ranks should have started before the deadline"
    assert not any(alive(p) for p in pids(tmp_path))


def test_interrupted_ladder_keeps_finished_rungs(tmp_path):
    """Ctrl-C while the second rung hangs: its processes are ended, it is recorded as interrupted, the first
    rung stays in the result file, and the interruption reaches the caller."""
    scenario, _ = spec_for(tmp_path)
    site = hanging_site(tmp_path, when="os.environ.get('VLABENCH_HANG') == '1'")
    out = tmp_path / "r.json"

    def press_ctrl_c_once_it_hangs():
        while not pids(tmp_path):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)  # what the terminal sends; Python raises KeyboardInterrupt

    def progress(line):
        if line.startswith("[2/2]"):
            os.environ["VLABENCH_HANG"] = "1"  # the next rung process hangs, silently
            threading.Thread(target=press_ctrl_c_once_it_hangs, daemon=True).start()

    # Python's own Ctrl-C handler, as in a terminal: a process started in the background by a non-interactive
    # shell (a CI job, `setsid cmd &`) inherits SIGINT ignored, and the signal below would then do nothing
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_scenario(scenario, get_target("cpu"), out, ["test"], progress=progress, env={"PYTHONPATH": str(site)})
    finally:
        signal.signal(signal.SIGINT, before)
        os.environ.pop("VLABENCH_HANG", None)
    result = load_result(out)
    status = {r["name"]: (r["status"], r.get("reason") or "") for r in result["rungs"]}
    assert status["community"][0] == "ok"
    assert status["prune"][0] == "error" and status["prune"][1].startswith("interrupted (Ctrl-C)")
    assert pids(tmp_path) and not any(alive(p) for p in pids(tmp_path))
