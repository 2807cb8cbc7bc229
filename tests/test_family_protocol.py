"""The harness drives a model family through the ModelFamily protocol alone: it imports no family's package, reads
no option by name, and a ladder, its report and the recompute sweep (its configurations, table, plan and compile
modes) run with every family wrapped in a proxy that refuses any attribute the protocol does not declare."""

import ast
import sys
import types
from pathlib import Path

import pytest

import models
from harness.ladder import rung as rung_module
from harness.ladder import runner
from harness.machine.hardware import get_target
from harness.report.report import ladder_table
from harness.scenario import load_scenario
from models import ModelFamily
from models.family import Knobs

ROOT = Path(__file__).resolve().parent.parent
DECLARED = {name for name in dir(ModelFamily) if not name.startswith("__")} | {"name", "sizes", "options_type"}

SCENARIO = """
name: protocol-test
model: {family}
workload: {{batch_size: 1, cameras: 2, text_tokens: 40, action_horizon: 4, warmup_steps: 1, timed_steps: 2,
           seed: 0, dtype: fp32}}
ladder:
  - {{name: community, options: {community}}}
  - {{name: second, options: {second}}}
targets:
  cpu: {{model_size: tiny}}
"""
RUNGS = {
    "gr00t": ("{attention: sdpa, lm_head: true}", "{lm_head: false}"),
    "pi05": ("{camera_slots: 3, recompute: nested-full}", "{camera_slots: auto}"),
}


class ProtocolOnly:
    """A family seen only through what ModelFamily declares; records what the harness used."""

    def __init__(self, family: ModelFamily):
        self._family, self.used = family, set()

    def __getattr__(self, name):
        if name not in DECLARED:
            raise AssertionError(f"the harness used {name!r}, which ModelFamily does not declare")
        self.used.add(name)
        return getattr(self._family, name)


def test_no_harness_module_imports_a_family_package():
    families = set(models.FAMILIES.values())
    for path in (ROOT / "harness").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            hit = [n for n in names if any(n == f or n.startswith(f + ".") for f in families)]
            assert not hit, f"{path.relative_to(ROOT)} imports {hit}"
        assert "hasattr(family" not in path.read_text(), path


@pytest.mark.parametrize("family_name", sorted(RUNGS))
def test_a_ladder_runs_with_the_family_seen_through_the_protocol_only(family_name, tmp_path, monkeypatch):
    proxy = ProtocolOnly(models.get_family(family_name))
    module = types.ModuleType("protocol_only_family")
    module.FAMILY = proxy
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(models.FAMILIES, family_name, module.__name__)
    # the rungs in this process (the runner's own subprocesses would import the real registry)
    monkeypatch.setattr(runner, "run_rung_process", lambda spec, *args, **kwargs: rung_module.run(spec))

    community, second = RUNGS[family_name]
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(family=family_name, community=community, second=second))
    result = runner.run_scenario(
        load_scenario(path), get_target("cpu"), tmp_path / "r.json", ["test"], progress=lambda line: None
    )

    assert [r["status"] for r in result["rungs"]] == ["ok", "ok"], [r.get("reason") for r in result["rungs"]]
    assert result["rungs"][1]["loss_parity"]["tolerance"] > 0
    assert "second" in ladder_table(result)
    assert {"parse_options", "build", "optimizer", "make_step", "make_batches", "flops_per_sample"} <= proxy.used
    assert {"parity_tolerance", "unsupported_reason", "ddp_flags", "rung_notes", "knobs"} <= proxy.used


def test_the_protocol_declares_the_knobs():
    assert {"knobs", "recompute_groups", "recompute_options", "compile_modes", "compile_options"} <= DECLARED
    for name in sorted(RUNGS):
        family = models.get_family(name)
        modes = family.compile_modes()
        assert modes[0] == "none" and family.knobs({}).compile == "none"
        for mode in modes:
            assert family.knobs(family.compile_options(mode)).compile == mode
        for patterns in family.recompute_groups().values():
            assert family.knobs(family.recompute_options(patterns)).recompute_patterns == patterns
        assert family.knobs(family.recompute_options(())).recompute_patterns == ()
        assert ModelFamily.knobs(family, {}) == Knobs()  # the default: no knob


# Option keys the harness used to read or write itself; the families answer for them now (knobs, *_options).
OPTION_KEYS = {"compile", "cuda_graphs", "recompute", "linear", "attention"}


def option_keys_named(source: str) -> list[tuple[int, str]]:
    """(line, key) of every option key a module subscripts, gets or writes in a mapping of options: a subscript,
    a `.get` or a dict display whose text mentions options (or the cumulative options) and holds such a key."""
    found = []
    lines = [line.encode() for line in source.splitlines(keepends=True)]

    def segment(node) -> str:  # ast.get_source_segment's text, without its re-split of the whole source per node
        first, last = node.lineno - 1, node.end_lineno - 1
        if first == last:
            return lines[first][node.col_offset : node.end_col_offset].decode()
        middle = b"".join(lines[first + 1 : last])
        return (lines[first][node.col_offset :] + middle + lines[last][: node.end_col_offset]).decode()

    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Subscript, ast.Call, ast.Dict)):
            continue
        text = segment(node).lower()
        if "option" not in text and "cumulative" not in text:
            continue
        keys = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in OPTION_KEYS]
        found += [(node.lineno, k) for k in keys]
    return found


def test_no_harness_module_reads_or_writes_an_option_by_name():
    """Option values are the family's to read (`knobs`) and to write (`recompute_options`, `compile_options`): no
    harness module (outside the evaluation, which builds policies) looks an option up by its name."""
    assert option_keys_named('x = (rung.get("options") or {}).get("cuda_graphs")') == [(1, "cuda_graphs")]
    assert option_keys_named('o = {**base.cumulative, "recompute": "none"}') == [(1, "recompute")]
    assert option_keys_named('n = floor["attention"]') == []
    for path in (ROOT / "harness").rglob("*.py"):
        if "eval" not in path.relative_to(ROOT).parts:
            assert not option_keys_named(path.read_text()), path.relative_to(ROOT)


@pytest.mark.parametrize("family_name", sorted(RUNGS))
def test_the_recompute_sweep_sees_the_family_through_the_protocol_only(family_name, monkeypatch, capsys):
    from harness.cli import main
    from harness.ladder.sweep import BASE, default_rung, plan_recompute, sweep_rows, sweep_scenario

    family = models.get_family(family_name)
    proxy = ProtocolOnly(family)
    module = types.ModuleType("protocol_only_family")
    module.FAMILY = proxy
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(models.FAMILIES, family_name, module.__name__)
    path = ROOT / "scenarios" / ("gr00t-loongforge.yaml" if family_name == "gr00t" else "pi05-loongforge.yaml")
    scenario = load_scenario(path)

    sweep = sweep_scenario(scenario, default_rung(scenario), "none", {})
    groups = family.recompute_groups()
    assert [r.name for r in sweep.ladder] == [BASE] + [f"recompute-{g}" for g in groups]
    rungs = [
        {"name": r.name, "status": "ok", "options": r.cumulative, "step_times_s": [1.0 + i / 10] * 3}
        for i, r in enumerate(sweep.ladder)
    ]
    for i, r in enumerate(rungs):
        r.update(step_time_s=r["step_times_s"][0], peak_memory_gib=10.0 - i)
    result = {"workload": {"model": family_name}, "rungs": rungs}
    assert [tuple(row["patterns"]) for row in sweep_rows(result)] == list(groups.values())
    first = next(iter(groups.values()))
    assert plan_recompute(result, 9.0).options == family.recompute_options(first)
    assert main(["recompute-sweep", str(path), "--target", "cpu", "--compile", "nope"]) == 2
    assert f"{family_name}'s compile modes" in capsys.readouterr().err
    assert {"knobs", "recompute_groups", "recompute_options", "compile_options", "compile_modes"} <= proxy.used


def test_the_protocol_declares_the_training_methods_and_their_defaults_refuse():
    """`vlabench train` calls only declared methods; a family that keeps their defaults is told which one it lacks."""
    from models.family import TRAINING_METHODS, unimplemented

    assert set(TRAINING_METHODS) <= DECLARED
    assert unimplemented(models.get_family("pi05"), TRAINING_METHODS) == []
    assert unimplemented(ProtocolOnly(models.get_family("pi05")), TRAINING_METHODS) == []
    gr00t = models.get_family("gr00t")
    assert unimplemented(gr00t, TRAINING_METHODS) == list(TRAINING_METHODS)
    with pytest.raises(NotImplementedError, match="the gr00t family has no read_weights"):
        gr00t.read_weights("nowhere")
