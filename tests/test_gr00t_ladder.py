"""The GR00T N1.6 ladder's CPU smoke run, as a newcomer's first command: `vlabench run
scenarios/gr00t-loongforge.yaml --target cpu` in a fresh folder (no runs/, no dataset), which makes the cpu
target's small synthetic dataset (its `data.make`) and then runs the tiny model through every rung; the rungs a
CPU cannot run are recorded with their reasons."""

from pathlib import Path

import pytest

from harness.cli import main
from harness.data.dataset import load_meta
from harness.results import load_result

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_gr00t_ladder_runs_on_a_cpu_from_a_fresh_clone(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # relative paths (runs/...) land here: nothing made beforehand
    assert not (tmp_path / "runs").exists()
    code = main(["run", str(ROOT / "scenarios/gr00t-loongforge.yaml"), "--target", "cpu", "--repeats", "1"])
    output = capsys.readouterr()
    assert code == 0, output.err
    # the dataset was made, with a line saying so, as `vlabench make-dataset` makes it
    dataset = Path("runs/datasets/libero-synthetic-smoke")
    assert (
        f"{dataset}: no dataset there yet; making it as data.make says: vlabench make-dataset --source " in output.out
    )
    assert len(load_meta(dataset).episodes) == 4
    (out,) = (tmp_path / "runs").glob("gr00t-loongforge-cpu-*.json")
    result = load_result(out)
    assert result["workload"]["data"]["dataset"] == str(dataset)
    rungs = {r["name"]: r for r in result["rungs"]}
    assert [r["status"] for r in rungs.values()] == [
        "ok",
        "ok",
        "unsupported",
        "unsupported",
        "unsupported",
        "ok",
        "ok",
        "unsupported",
        "ok",
        "ok",
        "unsupported",
        "unsupported",
    ]
    assert rungs["skip-lm-head"]["substituted"] == {
        "cuda_graphs": "True -> False",
        "grad_sync": "in-graph -> after-graph",
    }
    # the rung that introduces the optimizer's graph is its measurement: nothing stands in for it on the CPU
    assert "CUDA" in rungs["graphed-optimizer"]["reason"] and not rungs["graphed-optimizer"].get("substituted")
    # the clipping folded into the compiled AdamW update trains as the reference's clip and AdamW (without graphs)
    assert rungs["compiled-optimizer"]["substituted"]["graph_optimizer"] == "True -> False"
    assert rungs["compiled-optimizer"]["loss_parity"]["pass"]
    assert rungs["skip-lm-head"]["loss_parity"]["pass"]  # the discarded logits change no loss
    assert rungs["fc1-bias-in-gelu"]["loss_parity"]["pass"]
    # the rung introducing the bf16 weight copies is their measurement: nothing stands in for the graphs it inherits
    assert "CUDA" in rungs["bf16-weight-copies"]["reason"] and not rungs["bf16-weight-copies"].get("substituted")
    # compiled blocks (aot_eager on the CPU target) keep eager's dropout draws: parity holds tightly
    assert len(rungs["compile"]["applied"]["compile_units"]) == 2 + 4 + 4 and rungs["compile"]["loss_parity"]["pass"]
    assert "multi-process" in rungs["overlap-grad-comm"]["reason"]
    assert "CUDA" in rungs["cuda-graphs"]["reason"]
    # the same batches through both loaders: the async rung's losses are the community rung's
    assert rungs["async-input"]["losses"] == rungs["community"]["losses"]
    assert rungs["async-input"]["data_wait_share"] < 1 and rungs["community"]["loader"]["workers"] == 4
    # Isaac-GR00T's training augmentation in the workers, from the community rung on
    assert all(rungs[r]["loader"]["augment"]["name"] == "isaac-gr00t" for r in ("community", "async-input"))
