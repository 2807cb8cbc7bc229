"""`vlabench train` refuses bad input in one line (exit 2) before it builds anything."""

import json
from pathlib import Path

import pytest

from harness.cli import main

REPO = Path(__file__).resolve().parent.parent
SCENARIO = str(REPO / "scenarios" / "pi05-loongforge.yaml")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("data") / "ds"
    argv = ["make-dataset", "--source", "synthetic", "--episodes", "1", "--image-size", "32", "--out", str(out)]
    assert main(argv) == 0
    return str(out)


def refused(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vlabench: error: ") and "\n" not in err and "Traceback" not in err
    return err


def base(dataset: str, out: Path, *extra: str) -> list[str]:
    return ["train", SCENARIO, "--rung", "community", "--dataset", dataset, "--steps", "2", "--target", "cpu",
            "--out", str(out), *extra]  # fmt: skip


@pytest.mark.parametrize(
    "extra,expected",
    [
        (["--rung", "no-such-rung"], "--rung: expected a rung of pi05-loongforge"),
        (["--rung", "flex-attention"], "FlexAttention has no backward on cpu"),
        (["--grad-accum", "3"], "--grad-accum: expected a divisor of the batch size 2"),
        (["--ema-decay", "1.5"], "--ema-decay: expected a decay in (0, 1) or 'none'"),
        (["--model-size", "huge"], "--model-size: expected one of full, small, tiny"),
        (["--model-size", "full"], "--tokenizer: expected PaliGemma's tokenizer.model for the full model"),
        (["--init", "/no/such/checkpoint"], "--init: expected random or an existing checkpoint"),
        (
            ["--tokenizer", "/no/such/tokenizer.model"],
            "--tokenizer: expected a SentencePiece model file, 'bytes' or 'pieces'",
        ),
        (["--steps", "0"], "--steps: expected a positive number of steps"),
        (["--prepared-rows"], "--prepared-rows: expected --loader memory beside it, got --loader unset"),
        (["--target", "tpu"], "--target: expected one of"),
        (["--resume"], "--resume: expected a folder holding a training run to continue"),
    ],
)
def test_bad_input_is_one_line(dataset, tmp_path, capsys, extra, expected):
    argv = base(dataset, tmp_path / "run")
    if "--steps" in extra:
        argv[argv.index("--steps") : argv.index("--steps") + 2] = []
    if "--rung" in extra:
        argv[argv.index("--rung") : argv.index("--rung") + 2] = []
    assert expected in refused(capsys, [*argv, *extra])


def test_a_missing_dataset_and_an_existing_run_are_refused(dataset, tmp_path, capsys):
    err = refused(capsys, base(str(tmp_path / "nothing"), tmp_path / "run"))
    assert "make one: vlabench make-dataset" in err
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train.json").write_text(json.dumps({}))
    assert "--resume to continue" in refused(capsys, base(dataset, tmp_path / "run"))


def test_a_family_without_training_checkpoints_is_refused(dataset, tmp_path, capsys):
    argv = ["train", str(REPO / "scenarios" / "gr00t-loongforge.yaml"), "--rung", "community", "--dataset", dataset]
    err = refused(capsys, [*argv, "--steps", "2", "--target", "cpu", "--out", str(tmp_path / "run")])
    assert "a family whose checkpoints vlabench train writes (pi05)" in err


def test_train_check_refuses_a_result_that_is_not_a_training_run(capsys):
    ladder = str(REPO / "results" / "h200" / "pi05-loongforge.json")
    assert "expected a `vlabench train` result" in refused(capsys, ["train-check", "--reference", ladder, ladder])


def test_a_graphed_rung_takes_no_micro_batches(dataset, tmp_path, capsys):
    """A whole-step graph captures one step of the whole batch; micro-batches would accumulate outside it."""
    scenario = str(REPO / "scenarios" / "pi05-libero-train.yaml")
    argv = ["train", scenario, "--rung", "whole-step-graph", "--dataset", dataset, "--steps", "2", "--target", "h200"]
    err = refused(capsys, [*argv, "--grad-accum", "2", "--out", str(tmp_path / "run")])
    assert "--grad-accum: expected 1 for a rung with CUDA graphs, got 2" in err
