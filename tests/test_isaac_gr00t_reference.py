"""The comparison with Isaac-GR00T's own training step (scripts/isaac-gr00t-reference/step.py): the docs' tables
are the ones its --table prints from the committed results, and its summary reads the results as documented."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts/isaac-gr00t-reference/step.py"
RESULTS = sorted((ROOT / "docs/history/measurements/h200/reference").glob("isaac-gr00t-step-run*.json"))


def load_step_script():
    if str(SCRIPT.parent) not in sys.path:  # step.py imports data_path.py from beside it, as a script does
        sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("isaac_gr00t_step", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def docs_block() -> str:
    text = (ROOT / "docs/history/gr00t-runs.md").read_text()
    start, end = "<!-- isaac-gr00t-step tables -->\n", "\n<!-- end isaac-gr00t-step tables -->"
    return text[text.index(start) + len(start) : text.index(end)]


def test_the_docs_show_the_tables_the_script_prints_from_the_committed_results():
    assert len(RESULTS) == 2
    printed = subprocess.run(
        [sys.executable, str(SCRIPT), "--table", *map(str, RESULTS)], capture_output=True, text=True, check=True
    ).stdout
    assert docs_block() == printed.strip()


def test_the_reference_step_pools_both_of_its_measurements_and_the_script_notice_is_no_sync():
    step = load_step_script()
    result = {
        "isaac_gr00t": {"step_times_s": [0.2, 0.3, 0.4]},
        "isaac_gr00t_again": {"step_times_s": [0.5, 0.6]},
    }
    assert step.reference_median(result) == 0.4  # the median of all five, not of the first three
    assert step.reference_median({**result, "isaac_gr00t_again": {"error": "OOM"}}) == 0.3
    assert not step.is_real_sync("step.py:212:sync_sites")  # the debug mode's own first-use notice
    assert step.is_real_sync("modeling_siglip2.py:1103:forward")


def test_the_summary_sets_each_rung_against_the_pooled_reference_and_our_community_rung():
    step = load_step_script()
    times = {"isaac_gr00t": 0.3, "isaac_gr00t_again": 0.5, "vlabench_community": 0.36}
    times |= {"vlabench_cuda_graphs": 0.2, "vlabench_compile": 0.16}
    result = {key: {"step_times_s": [t] * 3} for key, t in times.items()} | {"vlabench_commit": "abc1234"}
    row = step.render_summary({"r": result}).splitlines()[-1]
    # pooled reference 0.4 s: community 0.90 of it; cuda-graphs 2.00x over it, 1.80x over community
    assert (
        row
        == "| r (abc1234) | 400.0 ms (300.0, 500.0) | 360.0 ms | 200.0 ms | 160.0 ms | 0.90 | 2.00x (1.80x) | 2.50x (2.25x) |"
    )


def test_the_diagnosis_script_loads_beside_the_step_script():
    """diagnose.py runs only on the GPU with their code; here: it imports what it uses (the step script's timing
    and profile, the data path's loader and stand-ins, vlabench's host probe and CPU counters)."""
    load_step_script()
    path = SCRIPT.parent / "diagnose.py"
    spec = importlib.util.spec_from_file_location("isaac_gr00t_diagnose", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.reference.synthetic_batch and module.data_path.DECODER_THREADS is None
    ticks = module.process_cores([os.getpid()])
    assert list(ticks.values())[0] > 0  # this process has used CPU time


def test_data_paths_alternate_the_sides_and_take_the_median_pair(tmp_path, monkeypatch):
    """--data-repeats N: theirs, ours, theirs, ours, ...; the ratio per pair and their median and range; a side that
    fails leaves its pair out and the others stand."""
    step = load_step_script()
    calls, theirs_rates, ours_rates = [], iter([100.0, 100.0, 80.0]), iter([120.0, 150.0, None])

    def side(name, rates):
        def measure(*_):
            calls.append(name)
            rate = next(rates)
            if rate is None:
                raise RuntimeError("community rung: crashed")
            return {"samples_per_s": rate, "samples_per_s_window": rate / 2, "step_times_s": [16 / rate]}

        return measure

    monkeypatch.setattr(step, "isaac_data_step", side("theirs", theirs_rates))
    monkeypatch.setattr(step, "vlabench_data_rung", side("ours", ours_rates))
    result, out = {}, tmp_path / "r.json"
    step.data_paths(result, tmp_path / "dataset", 50, "h200", out, repeats=3)
    assert calls == ["theirs", "ours"] * 3
    assert [p["samples_per_s"] for p in result["data_path_pairs"]] == [1.2, 1.5]
    summary = result["data_path_ours_over_theirs"]
    assert summary == {"samples_per_s": 1.35, "samples_per_s_window": 1.35, "min": 1.2, "max": 1.5, "pairs": 2}
    assert "error" in result["vlabench_community_data_3"] and "isaac_gr00t_data_2" in result
    assert '"data_path_pairs"' in out.read_text()


def test_data_paths_can_also_time_ours_inside_the_references_process(tmp_path, monkeypatch):
    """--in-process: each pair is theirs, ours in its own process, ours inside step.py's; each of ours gets its
    ratio over the same pair's theirs, and the two medians are kept apart."""
    step = load_step_script()
    calls = []

    def theirs(*_):
        calls.append("theirs")
        return {"samples_per_s": 100.0, "samples_per_s_window": 50.0, "step_times_s": [0.16]}

    def ours(dataset, timed, target, size, in_process):
        calls.append("inside" if in_process else "own")
        rate = 105.0 if in_process else 130.0
        return {"samples_per_s": rate, "samples_per_s_window": rate / 2, "step_times_s": [16 / rate]}

    monkeypatch.setattr(step, "isaac_data_step", theirs)
    monkeypatch.setattr(step, "vlabench_data_rung", ours)
    result = {}
    step.data_paths(result, tmp_path / "dataset", 50, "h200", tmp_path / "r.json", repeats=2, in_process=True)
    assert calls == ["theirs", "own", "inside"] * 2
    assert result["data_path_ours_over_theirs"]["samples_per_s"] == pytest.approx(1.3)
    assert result["data_path_in_process_ours_over_theirs"]["samples_per_s"] == pytest.approx(1.05)
    assert "vlabench_community_data_in_process_2" in result and result["data_path_in_process_pairs"][1]


def test_the_gc_watch_counts_the_collections_made_while_it_is_active():
    import gc

    step = load_step_script()
    with step.GcWatch() as watch:
        gc.collect()
        gc.collect(0)
    gc.collect()  # after the watch: not counted
    record = watch.record()
    assert record["collections"][2] == 1 and record["collections"][0] >= 1
    assert record["tracked_objects"] > 1000 and record["seconds"] > 0
    assert watch._callback not in gc.callbacks


def test_the_packed_vision_tower_dispatches_the_references_slices_and_copies():
    """`vision_packing: reference` at the reference's batch (32 views of 252 pixels: 18x18 patches, four windows
    each; 27 layers, narrow widths: the count does not depend on them), counted by the census that counted the
    reference's tower in the committed step profile: its slices and copies, where the batched forward makes none."""
    import json
    from dataclasses import replace

    import torch

    from models.gr00t.config import TINY
    from models.gr00t.model import SiglipVision

    step = load_step_script()
    reference = json.loads((ROOT / "docs/history/measurements/h200/reference/isaac-gr00t-step-run2.json").read_text())[
        "isaac_gr00t"
    ]["components"]["ops"]["vision"]["by_op"]
    vision = SiglipVision(replace(TINY.vision, image_size=252, layers=27, position_grid=16)).eval()
    images = torch.rand(32, 3, 252, 252)
    counts = {}
    for packed in (False, True):
        vision.reference_packing = packed
        with torch.no_grad(), step.OpCensus() as census:
            vision(images)
        counts[packed] = {op: n for (_, op), n in census.counts.items()}
    assert counts[False].get("slice", 0) == 0 and counts[False].get("clone", 0) <= 1
    assert counts[True]["slice"] == reference["slice"] == 416
    assert counts[True]["clone"] == reference["clone"] == 225


def test_the_rungs_beside_the_reference_are_the_scenarios():
    """step.py's vlabench rungs carry the options of scenarios/gr00t-loongforge.yaml's rungs of the same name,
    cumulated (the host syncs of the community rung included), apart from the fixed VL padding it adds."""
    from harness.scenario import load_scenario
    from models.gr00t import parse_options

    step = load_step_script()
    scenario = load_scenario(ROOT / "scenarios/gr00t-loongforge.yaml")
    cumulated, by_name = {}, {}
    for rung in scenario.ladder:
        cumulated = {**cumulated, **rung.options}
        by_name[rung.name] = dict(cumulated)
    several = ("ddp", "grad_sync")  # data parallelism: step.py runs one process
    for name, options in step.RUNGS.items():
        wanted = {k: v for k, v in by_name[name.removeprefix("vlabench_").replace("_", "-")].items()}
        wanted = {k: v for k, v in wanted.items() if k not in several}
        ours, theirs = parse_options(options).as_dict(), parse_options(wanted).as_dict()
        ours.pop("vl_pad"), theirs.pop("vl_pad")
        assert ours == theirs, name
