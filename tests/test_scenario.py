import hashlib
import textwrap

import pytest

from harness.scenario import Rung, ScenarioError, Workload, load_scenario

VALID = """\
name: pi05-demo
model: pi05
source: a write-up
workload: {batch_size: 32, cameras: 2, text_tokens: 200, action_horizon: 50,
           warmup_steps: 5, timed_steps: 20, seed: 0}
ladder:
  - {name: community, options: {camera_slots: 3, attention: eager, recompute: nested-full, compile: none}}
  - {name: prune-empty-cameras, options: {camera_slots: 2}}
  - {name: recompute-vit-only, options: {recompute: {patterns: ["vision.layers.*"]}}}
  - {name: no-recompute, options: {recompute: none}}
  - {name: fp8, options: {linear: fp8}, requires: [fp8]}
targets:
  cpu: {model_size: tiny, batch_size: 2, timed_steps: 3, lr: 1e-4}
  h200:
"""


def write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def error_for(tmp_path, text) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message


def test_valid_scenario(tmp_path):
    path = write(tmp_path, VALID)
    s = load_scenario(path)
    assert (s.name, s.model, s.source, s.path) == ("pi05-demo", "pi05", "a write-up", str(path))
    assert s.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert s.workload == Workload(batch_size=32)  # the rest are the defaults
    assert s.rung_names() == ["community", "prune-empty-cameras", "recompute-vit-only", "no-recompute", "fp8"]

    base = {"camera_slots": 3, "attention": "eager", "recompute": "nested-full", "compile": "none"}
    assert s.ladder[0] == Rung("community", base, base, ())
    assert s.ladder[1].options == {"camera_slots": 2}
    assert s.ladder[1].cumulative == {**base, "camera_slots": 2}
    # A later rung replaces a key wholesale, mapping or not.
    assert s.ladder[2].cumulative["recompute"] == {"patterns": ["vision.layers.*"]}
    assert s.ladder[3].cumulative["recompute"] == "none"
    assert s.ladder[4].cumulative == {**base, "camera_slots": 2, "recompute": "none", "linear": "fp8"}
    assert s.ladder[4].requires == ("fp8",)
    assert s.ladder[0].requires == ()

    cpu = s.workload_for("cpu")
    assert (cpu.model_size, cpu.batch_size, cpu.timed_steps, cpu.cameras) == ("tiny", 2, 3, 2)
    assert cpu.lr == 1e-4 and isinstance(cpu.lr, float)  # YAML 1.1 reads 1e-4 as a string
    assert s.workload_for("h200") == s.workload
    assert s.workload_for("h200").as_dict()["batch_size"] == 32
    assert s.workload_for("cuda") == s.workload  # a known target the scenario does not list: the workload unchanged
    assert not s.lists_target("cuda") and s.lists_target("h200")
    with pytest.raises(
        ScenarioError, match=r"targets: expected a known target \(cpu, h200, .*\), got unknown target 'tpu'"
    ):
        s.workload_for("tpu")


def test_missing_file(tmp_path):
    with pytest.raises(ScenarioError, match="expected an existing scenario file, got no such file"):
        load_scenario(tmp_path / "nope.yaml")


def test_yaml_syntax_error_names_the_line(tmp_path):
    message = error_for(tmp_path, "name: x\nmodel: pi05\nworkload: {batch_size: 2\nladder: []\n")
    assert ": line 4: expected valid YAML, got" in message


@pytest.mark.parametrize("text, got", [("- a\n- b\n", "got list"), ("", "got null (empty file)")])
def test_top_level_not_a_mapping(tmp_path, text, got):
    assert f"(top level): expected a mapping, {got}" in error_for(tmp_path, text)


def test_unknown_top_level_key_lists_allowed(tmp_path):
    message = error_for(tmp_path, VALID + "ladders: []\n")
    assert (
        ": ladders: expected a known key (name, model, workload, ladder, targets, source, description, eval, train, parity_baseline, memory)"
        in message
    )
    assert "got unknown key 'ladders'" in message


def test_missing_required_key(tmp_path):
    message = error_for(tmp_path, VALID.replace("name: pi05-demo\n", ""))
    assert ": name: expected a value, got nothing (missing required key)" in message
    message = error_for(tmp_path, VALID.replace("batch_size: 32, ", ""))
    assert ": workload.batch_size: expected a value, got nothing" in message


@pytest.mark.parametrize(
    "old, new, key, expected, got",
    [
        ("timed_steps: 20", "timed_steps: true", "workload.timed_steps", "an integer 1..100000", "boolean true"),
        ("timed_steps: 20", "timed_steps: 0", "workload.timed_steps", "an integer 1..100000", "integer 0"),
        ("seed: 0", "seed: -1", "workload.seed", "an integer 0..4294967295", "integer -1"),
        ("cameras: 2", "cameras: 2.5", "workload.cameras", "an integer 1..16", "number 2.5"),
        ("seed: 0}", "seed: 0, batchsize: 3}", "workload.batchsize", "a known key (batch_size, cameras", "unknown key"),
        ("batch_size: 2,", "batch_size: two,", "targets.cpu.batch_size", "an integer 1..65536", "string 'two'"),
        ("lr: 1e-4", "lr: -1", "targets.cpu.lr", "a positive number", "integer -1"),
        ("model_size: tiny", "model_size: huge", "targets.cpu.model_size", "one of full, small, tiny", "string 'huge'"),
        ("seed: 0}", "seed: 0, dtype: fp16}", "workload.dtype", "one of bf16, fp32", "string 'fp16'"),
        (
            "  h200:\n",
            "  a800: {}\n",
            "targets.a800",
            "a known target (cpu, h200, h100, a100, cuda",
            "unknown target 'a800'",
        ),
        ("  h200:\n", "  h200: [1]\n", "targets.h200", "a mapping", "list [1]"),
        ("model: pi05", "model: pi0", "model", "one of pi05, gr00t", "string 'pi0'"),
        ("name: pi05-demo", "name: 3", "name", "a non-empty string", "integer 3"),
    ],
)
def test_wrong_values(tmp_path, old, new, key, expected, got):
    assert old in VALID
    message = error_for(tmp_path, VALID.replace(old, new, 1))
    assert f": {key}: expected {expected}" in message
    assert f"got {got}" in message


@pytest.mark.parametrize(
    "old, new, key, expected, got",
    [
        (
            "{camera_slots: 2}",
            "{attention: flash}",
            "ladder[1].options.attention",
            "one of eager, sdpa, flex",
            "string 'flash'",
        ),
        (
            "{linear: fp8}",
            "{linear: fp8, speed: 11}",
            "ladder[4].options.speed",
            "a known key (camera_slots, attention",
            "unknown key 'speed'",
        ),
        (
            '{patterns: ["vision.layers.*"]}',
            "{patterns: []}",
            "ladder[2].options.recompute.patterns",
            "a non-empty list of module-name glob patterns",
            "list []",
        ),
        ("{camera_slots: 2}", "[camera_slots]", "ladder[1].options", "a mapping", "list"),
        (
            "name: no-recompute",
            "name: community",
            "ladder[3].name",
            "a name not used by another rung",
            "'community' again (also ladder[0])",
        ),
        ("name: no-recompute", "name: No_Recompute", "ladder[3].name", "a name of lowercase letters", "string"),
        (
            "requires: [fp8]",
            "requires: fp8",
            "ladder[4].requires",
            "a list of (fp8, flex-backward, compile, multi-process)",
            "string 'fp8'",
        ),
        (
            "requires: [fp8]",
            "requires: [1]",
            "ladder[4].requires[0]",
            "one of fp8, flex-backward, compile, multi-process",
            "integer 1",
        ),
        (
            "requires: [fp8]",
            "requires: [fp-8]",
            "ladder[4].requires[0]",
            "one of fp8, flex-backward, compile, multi-process",
            "string 'fp-8'",
        ),
        (
            "requires: [fp8]",
            "required: [fp8]",
            "ladder[4].required",
            "a known key (name, options, requires, loader, plan)",
            "unknown key",
        ),
    ],
)
def test_bad_rungs(tmp_path, old, new, key, expected, got):
    assert old in VALID
    message = error_for(tmp_path, VALID.replace(old, new, 1))
    assert f": {key}: expected {expected}" in message
    assert f"got {got}" in message


def test_empty_ladder_and_targets(tmp_path):
    base = "name: x\nmodel: pi05\nworkload: {batch_size: 1}\n"
    assert ": ladder: expected a non-empty list of rungs, got list []" in error_for(
        tmp_path, base + "ladder: []\ntargets: {cpu: {}}\n"
    )
    assert ": targets: expected a non-empty mapping" in error_for(
        tmp_path, base + "ladder: [{name: base}]\ntargets: {}\n"
    )


def test_minimal_scenario_uses_defaults(tmp_path):
    s = load_scenario(
        write(tmp_path, "name: x\nmodel: pi05\nworkload: {batch_size: 1}\nladder: [{name: base}]\ntargets: {cpu: {}}\n")
    )
    assert s.ladder == (Rung("base", {}, {}, ()),)
    assert s.workload_for("cpu") == Workload(batch_size=1)
    assert s.source is None and s.eval is None


def test_the_family_decides_what_options_need_and_requires_only_adds(tmp_path):
    """The model family's unsupported_reason is the one place that knows what an option needs: a rung without
    `requires` is unsupported where its options cannot train (the family's reason), and a `requires` that an old
    file still writes is honoured for what the options do not need."""
    from harness.ladder.runner import unsupported_reason
    from harness.machine.hardware import get_target

    s = load_scenario(write(tmp_path, VALID.replace(", requires: [fp8]", "")))
    cpu = get_target("cpu")
    assert "FP8" in unsupported_reason(s, cpu, s.ladder[4], frozenset({"compile"}))
    assert unsupported_reason(s, cpu, s.ladder[4], frozenset({"compile", "fp8"})) is None
    old = Rung("old", {}, s.ladder[1].cumulative, ("multi-process",))
    assert unsupported_reason(s, cpu, old, frozenset({"compile"})) == "target cpu lacks multi-process (has: compile)"


def test_no_shipped_rung_requires_what_its_options_already_need():
    """`requires` in the shipped scenarios only where the family cannot say it from the options: without the
    capability, the family alone would let the rung train."""
    from pathlib import Path

    from models import get_family

    for path in sorted((Path(__file__).resolve().parent.parent / "scenarios").glob("*.yaml")):
        scenario = load_scenario(path)
        family = get_family(scenario.model)
        for rung in scenario.ladder:
            options = family.parse_options(rung.cumulative)
            for need in rung.requires:
                others = frozenset({"fp8", "flex-backward", "compile", "multi-process"}) - {need}
                assert family.unsupported_reason(options, "cuda", others) is None, (path.name, rung.name, need)
