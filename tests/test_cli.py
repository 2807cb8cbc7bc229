"""The command line's small promises: `--version`, one-line errors for an unknown model family, an unknown table
format and an evaluation scenario given to `run`, `--rung-timeout` on every command that times a process, and
install hints that keep the installed torch."""

import json
from importlib.metadata import version
from pathlib import Path

import pytest
import torch

import models
from harness.cli import build_parser, main
from models.extras import pip_install

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("vlabench: error: "), err
    return err


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"vlabench {version('vlabench')}"


def test_an_unknown_model_family_is_one_line_naming_the_known_ones(tmp_path, capsys):
    with pytest.raises(LookupError) as err:
        models.get_family("openvla")
    assert isinstance(err.value, models.UnknownFamilyError)
    assert str(err.value) == "unknown model family 'openvla'; known families: " + ", ".join(models.FAMILIES)
    # through the CLI: a result file naming a family this checkout does not have
    result = json.loads((FIXTURES / "ladder-h200.json").read_text())
    result["workload"]["model"] = "openvla"
    (tmp_path / "r.json").write_text(json.dumps(result))
    assert main(["show", str(tmp_path / "r.json")]) == 2
    assert "unknown model family 'openvla'; known families: pi05, gr00t" in one_line_error(capsys)


def test_show_accepts_tabulate_formats_only(capsys):
    ladder = str(FIXTURES / "ladder-h200.json")
    assert main(["show", ladder, "--format", "github"]) == 0
    assert "| rung " in capsys.readouterr().out
    assert main(["show", ladder, "--format", "markdown"]) == 2
    err = one_line_error(capsys)
    assert "--format: expected a tabulate format (" in err and "github" in err and err.endswith("got 'markdown'")


def test_floor_takes_rung_timeout_and_keeps_timeout_as_a_hidden_alias(capsys):
    parser = build_parser()
    assert parser.parse_args(["floor", "s.yaml", "--rung-timeout", "30"]).rung_timeout == 30
    assert parser.parse_args(["floor", "s.yaml", "--timeout", "40"]).timeout == 40
    args = parser.parse_args(["floor", "s.yaml"])
    assert args.timeout is None and args.rung_timeout is None
    # each is checked under the name it was given as
    assert main(["floor", "s.yaml", "--rung-timeout", "0"]) == 2
    assert one_line_error(capsys).endswith("--rung-timeout: expected a positive number of seconds, got 0")
    assert main(["floor", "s.yaml", "--timeout", "-1"]) == 2
    assert one_line_error(capsys).endswith("--timeout: expected a positive number of seconds, got -1")
    with pytest.raises(SystemExit):
        parser.parse_args(["floor", "--help"])
    help_text = capsys.readouterr().out
    assert "--rung-timeout S" in help_text and "--timeout" not in help_text
    for command in ("run", "recompute-sweep"):  # the flag every command that times a process shares
        assert parser.parse_args([command, "s.yaml", "--rung-timeout", "5"]).rung_timeout == 5


def test_run_refuses_an_evaluation_scenario_in_one_line(capsys):
    """scenarios/libero-expert-ci.yaml is evaluated, not trained: `run` would train the full model on a
    placeholder ladder; it names the command that runs it instead."""
    assert main(["run", str(ROOT / "scenarios/libero-expert-ci.yaml"), "--target", "cpu"]) == 2
    err = one_line_error(capsys)
    assert "eval: expected a training scenario for `vlabench run`" in err
    assert "vlabench eval --scenario " in err


def test_install_hints_pin_the_installed_torch(monkeypatch, tmp_path, capsys):
    """Without the pin, pip resolves an extra against the newest torch and swaps a CPU torch for a CUDA build:
    every hint gives the README's form, `pip install torch==X -e '.[extra]'`."""
    pin = torch.__version__.split("+")[0]
    assert pip_install("sim") == f"pip install torch=={pin} -e '.[sim]'"
    from harness.eval import sim

    monkeypatch.setattr(sim, "missing_packages", lambda: ["libero"])
    code = main(["eval", "--suite", "libero_spatial", "--policy", "noop", "--out", str(tmp_path / "e.json")])
    assert code == 2
    assert one_line_error(capsys).endswith(f"install vlabench[sim]: pip install torch=={pin} -e '.[sim]'")
    # no hint anywhere in the code leaves the pin out
    unpinned = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("harness", "models")
        for path in (ROOT / folder).rglob("*.py")
        if path.name != "extras.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "pip install" in line and ("vlabench[" in line or "-e '." in line) and "pip_install(" not in line
    ]
    assert unpinned == []
