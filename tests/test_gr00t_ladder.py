"""The GR00T N1.6 ladder's CPU smoke run: the tiny model through every rung of scenarios/gr00t-loongforge.yaml on
a small LeRobot-format dataset written here; the rungs a CPU cannot run are recorded with their reasons."""

from pathlib import Path

import pytest

from harness.cli import main
from harness.data import lerobot_format as fmt
from harness.data.synthetic import synthetic_episodes
from harness.data.writer import write_dataset
from harness.results import load_result

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_gr00t_ladder_runs_on_a_cpu(tmp_path, capsys):
    dataset = tmp_path / "libero-synthetic"
    write_dataset(dataset, synthetic_episodes(3, seed=2, image_size=64, lengths=(30, 40)), fmt.libero_features(64))
    out = tmp_path / "r.json"
    code = main(
        [
            "run",
            str(ROOT / "scenarios/gr00t-loongforge.yaml"),
            "--target",
            "cpu",
            "--dataset",
            str(dataset),
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    rungs = {r["name"]: r for r in load_result(out)["rungs"]}
    assert [r["status"] for r in rungs.values()] == [
        "ok",
        "ok",
        "unsupported",
        "unsupported",
        "ok",
        "ok",
        "unsupported",
    ]
    assert rungs["skip-lm-head"]["substituted"] == {"cuda_graphs": "True -> False"}
    assert rungs["skip-lm-head"]["loss_parity"]["pass"]  # the discarded logits change no loss
    # compiled blocks (aot_eager on the CPU target) keep eager's dropout draws: parity holds tightly
    assert len(rungs["compile"]["applied"]["compile_units"]) == 2 + 4 + 4 and rungs["compile"]["loss_parity"]["pass"]
    assert "multi-process" in rungs["overlap-grad-comm"]["reason"]
    assert "CUDA" in rungs["cuda-graphs"]["reason"]
    # the same batches through both loaders: the async rung's losses are the community rung's
    assert rungs["async-input"]["losses"] == rungs["community"]["losses"]
    assert rungs["async-input"]["data_wait_share"] < 1 and rungs["community"]["loader"]["workers"] == 2
