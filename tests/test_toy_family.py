"""A toy third model family (tests/fixtures/toy_family.py), registered from outside models/ through VLABENCH_FAMILIES,
runs a two-rung ladder with `vlabench run` (each rung in its own process, as always) and `vlabench show` prints it:
the harness drives a family through the ModelFamily protocol alone."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import models
from harness.cli import main

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"

SCENARIO = """
name: toy-ladder
model: toy
description: a two-rung ladder of the toy family (tests/fixtures/toy_family.py)
workload: {batch_size: 4, action_horizon: 2, warmup_steps: 1, timed_steps: 3, seed: 0, dtype: fp32,
           model_size: tiny, compile_backend: aot_eager}
ladder:
  - {name: baseline, options: {width: 16}}
  - {name: compile, options: {compile: default}}
targets:
  h200: {}
"""


@pytest.fixture
def toy_registered(monkeypatch):
    """The toy family registered as a user would (VLABENCH_FAMILIES, its folder on PYTHONPATH), also in this process,
    which imported `models` before the variable was set."""
    monkeypatch.setenv(models.FAMILIES_ENV, "toy=toy_family")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(FIXTURES), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setitem(models.FAMILIES, "toy", "toy_family")


def test_families_from_env():
    assert models.families_from_env(None) == {}
    assert models.families_from_env(" toy = toy_family, other=pkg.mod ,") == {"toy": "toy_family", "other": "pkg.mod"}
    with pytest.raises(ValueError, match="name=module"):
        models.families_from_env("toy")


def test_a_new_process_sees_the_registered_family(toy_registered):
    code = "import models; print(models.get_family('toy').name, list(models.FAMILIES))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": os.environ["PYTHONPATH"] + os.pathsep + str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split(" ", 1) == ["toy", "['pi05', 'gr00t', 'toy']\n"]


@pytest.mark.slow  # a subprocess ladder (about 12 s on 2 cores)
def test_the_toy_family_runs_a_ladder_and_shows_it(toy_registered, tmp_path, capsys):
    from toy_family import FAMILY, ToyFamily

    from models import ModelFamily

    # only what the protocol requires: every method the toy family defines is one the base class leaves unimplemented
    own = {k for k in vars(ToyFamily) if not k.startswith("__")} - {"name", "sizes", "options_type"}
    assert own == {"parity_tolerance", "build", "optimizer", "make_batches", "flops_per_sample"}
    assert isinstance(FAMILY, ModelFamily)

    scenario, out = tmp_path / "toy.yaml", tmp_path / "toy.json"
    scenario.write_text(SCENARIO)
    # cpu is not listed in the scenario's targets: a known target runs the workload unchanged
    assert main(["run", str(scenario), "--target", "cpu", "--repeats", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    rungs = result["rungs"]
    assert [r["status"] for r in rungs] == ["ok", "ok"], [r.get("reason") for r in rungs]
    assert rungs[1]["options"] == {"width": 16, "compile": "default"}  # cumulative
    parity = rungs[1]["loss_parity"]
    assert parity["pass"] and parity["against"] == "baseline" and parity["max_rel_diff"] <= parity["tolerance"]
    assert rungs[1]["applied"]["compile_units"] == ["net"]
    assert result["workload"]["model"] == "toy" and result["target"]["listed_in_scenario"] is False
    capsys.readouterr()

    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "toy-ladder" in shown and "baseline" in shown and "compile" in shown
