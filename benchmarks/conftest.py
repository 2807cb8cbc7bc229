"""Options of the pytest-benchmark module: which scenario's rungs to time, on which target."""

from pathlib import Path

from harness.scenario import load_scenario

DEFAULT_SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "pi05-loongforge.yaml"


def pytest_addoption(parser):
    group = parser.getgroup("vlabench")
    group.addoption("--vlabench-scenario", default=str(DEFAULT_SCENARIO), help="scenario YAML whose rungs to time")
    group.addoption("--vlabench-target", default=None, help="target name (default: auto-detect)")


def pytest_generate_tests(metafunc):
    if "rung_name" in metafunc.fixturenames:
        scenario = load_scenario(metafunc.config.getoption("--vlabench-scenario"))
        metafunc.parametrize("rung_name", scenario.rung_names())
