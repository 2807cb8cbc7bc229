"""The harness drives a model family through the ModelFamily protocol alone: it imports no family's package, and a
ladder, its comparisons, its report and the recompute sweep's groups run with every family wrapped in a proxy
that refuses any attribute the protocol does not declare."""

import ast
import sys
import types
from pathlib import Path

import pytest

import models
from harness import rung as rung_module
from harness import runner
from harness.hardware import get_target
from harness.report import ladder_table
from harness.scenario import load_scenario
from models import ModelFamily

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
    assert {"parity_tolerance", "unsupported_reason", "ddp_flags", "rung_notes"} <= proxy.used
