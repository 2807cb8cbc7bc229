"""The data path inside the timed step: a LeRobot-format dataset (written here, never committed) read by the
community loader and the asynchronous pipeline; both give the same batches and the same losses, the step's
wait for data is recorded, and a missing dataset is one line, not a crashed rung per rung."""

import json
from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.data import lerobot_format as fmt
from harness.data.fingerprint import dataset_fingerprint
from harness.data.pipeline import BatchSource, DatasetFeed, DataSpec, LoaderOptions
from harness.data.synthetic import synthetic_episodes
from harness.data.writer import write_dataset
from harness.results import load_result
from models.pi05 import FAMILY
from models.schema import SchemaError
from models.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = Workload(batch_size=2, cameras=2, text_tokens=64, action_horizon=8, dtype="fp32", seed=0)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("data") / "libero-synthetic"
    write_dataset(root, synthetic_episodes(3, seed=1, image_size=64, lengths=(20, 30)), fmt.libero_features(64))
    return root


def feed(dataset, kind, workers=1, **options):
    spec = DataSpec(dataset=str(dataset))
    return DatasetFeed(
        spec,
        LoaderOptions(kind=kind, workers=workers, **options),
        FAMILY,
        "tiny",
        WORKLOAD,
        torch.device("cpu"),
        torch.float32,
        seed=0,
    )


def test_both_loaders_give_the_same_batches(dataset):
    sync, asynchronous = feed(dataset, "torch"), feed(dataset, "async")
    try:
        for i in range(6):  # a few steps, in order
            a, wait_a = sync.fetch(i)
            b, wait_b = asynchronous.fetch(i)
            assert a.keys() == b.keys() and wait_a >= 0 and wait_b >= 0
            for key in a:
                assert torch.equal(a[key], b[key]), key
        assert a["images"].shape == (2, 2, 3, 56, 56) and a["tokens"].shape == (2, 64)
        assert a["actions"].shape == (2, 8, 32) and a["action_is_pad"].dtype == torch.bool
    finally:
        sync.close()
        asynchronous.close()


@pytest.mark.parametrize("kind", ["torch", "memory"])
def test_more_loader_workers_than_cpus_is_one_line_of_ours_not_torchs_two_warnings(dataset, kind, capsys, monkeypatch):
    """On a 2-core machine a rung of 4 workers printed torch's over-subscription warning twice (when the DataLoader
    is made and when it is iterated); the workers are kept (they are what the rung measures) and said once."""
    import os
    import warnings

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})  # one usable CPU, for torch's check and ours
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        source = feed(dataset, kind, workers=2)
        try:
            source.fetch(0)
        finally:
            source.close()
    assert not [w for w in caught if "worker" in str(w.message)], [str(w.message) for w in caught]
    out = capsys.readouterr().out
    assert out.count("loader: 2 worker processes share 1 usable CPUs (kept: they are part of what is measured)") == 1


def test_memory_loader_gives_the_same_batches_as_the_per_sample_loader(dataset, capsys):
    """Frames decoded once into memory, then gathered per batch: the very batches of the community loader."""
    sync, memory = feed(dataset, "torch"), feed(dataset, "memory", workers=2)
    try:
        frames = memory.memory.frames
        assert frames.dtype == torch.uint8 and frames.shape == (len(memory.dataset), 2, 64, 64, 3)
        for i in range(30):  # past the first epoch (50 rows in batches of 2)
            a, _ = sync.fetch(i)
            b, wait = memory.fetch(i)
            assert a.keys() == b.keys() and wait >= 0
            for key in a:
                assert torch.equal(a[key], b[key]), key
        described = memory.describe()["loader"]
        assert described["kind"] == "memory" and described["memory"]["bytes"] == frames.numel()
    finally:
        sync.close()
        memory.close()
    assert "frames of 2 camera(s) decoded in" in capsys.readouterr().out


@pytest.mark.parametrize("family", ["pi05", "gr00t"])
def test_prepared_rows_give_the_same_batches_without_reading_or_tokenising_per_batch(
    dataset, capsys, monkeypatch, family
):
    """prepared_rows: every row's fields (and Pi0.5's prompt tokens) prepared once; the batches are the per-batch
    path's, and once the feed is built no batch reads a row from the tables or tokenises a prompt. GR00T derives
    nothing per row (its prompts are padded to each batch's longest), so it gathers the collated fields alone."""
    from harness.data.dataset import LeRobotV3Dataset
    from models import get_family

    def make(**options):
        spec = DataSpec(dataset=str(dataset))
        args = (get_family(family), "tiny", WORKLOAD, torch.device("cpu"), torch.float32)
        return DatasetFeed(spec, LoaderOptions(kind="memory", workers=1, **options), *args, seed=0)

    per_batch = make()
    try:
        expected = [per_batch.fetch(i)[0] for i in range(30)]  # past the first epoch (50 rows in batches of 2)
    finally:
        per_batch.close()
    prepared = make(prepared_rows=True)
    try:
        assert ("rows' fields (with token_masks, tokens)" in capsys.readouterr().out) is (family == "pi05")

        def refuse(*args):
            raise AssertionError("a batch read or tokenised its rows")

        monkeypatch.setattr(LeRobotV3Dataset, "__getitem__", refuse)
        if family == "pi05":
            monkeypatch.setattr(type(prepared.processor), "tokenize", refuse)
        for i, a in enumerate(expected):
            b, _ = prepared.fetch(i)
            assert a.keys() == b.keys()
            for key in a:
                assert torch.equal(a[key], b[key]), key
        described = prepared.describe()["loader"]["prepared_rows"]
        assert described["derived"] == (["token_masks", "tokens"] if family == "pi05" else [])
    finally:
        prepared.close()
    with pytest.raises(SchemaError, match="prepared_rows: expected false unless the loader is the memory loader"):
        LoaderOptions(kind="async", prepared_rows=True)


def test_discrete_action_dimensions_are_found(dataset):
    """The synthetic gripper is -1 or 1 at every frame; the arm's six values are continuous."""
    from harness.data.dataset import LeRobotV3Dataset

    assert LeRobotV3Dataset(dataset).discrete_action_values() == {6: [-1.0, 1.0]}


def test_memory_loader_refuses_a_worker_augmentation():
    from models.schema import SchemaError

    with pytest.raises(SchemaError, match="augment.*none with the memory loader"):
        LoaderOptions(kind="memory", augment="isaac-gr00t")
    with pytest.raises(SchemaError, match="preprocess.*host with the memory loader"):
        LoaderOptions(kind="memory", preprocess="workers")


def test_sample_order_is_a_seeded_permutation_per_epoch(dataset):
    from harness.data.pipeline import EpochPermutations

    n = 5
    order = [i for _, i in zip(range(3 * n), EpochPermutations(n, seed=3))]
    assert all(sorted(order[e * n : (e + 1) * n]) == list(range(n)) for e in range(3))  # each epoch is a permutation
    assert order[:n] != order[n : 2 * n] or order[n : 2 * n] != order[2 * n :]  # epochs are reshuffled
    assert order == [i for _, i in zip(range(3 * n), EpochPermutations(n, seed=3))]


def test_async_pipeline_hands_back_an_error_of_its_thread(dataset):
    def broken(raw, generator):
        raise ValueError("preprocessing failed")

    from functools import partial

    from harness.data.dataset import LeRobotV3Dataset
    from models.pi05.processor import Pi05Processor

    data = LeRobotV3Dataset(dataset, action_horizon=4)
    source = BatchSource(
        data,
        2,
        LoaderOptions(kind="async", workers=0),
        partial(Pi05Processor.collate, cameras=tuple(data.cameras)),
        broken,
        torch.device("cpu"),
        0,
    )
    with pytest.raises(ValueError, match="preprocessing failed"):
        source.next()
    source.close()


SCENARIO = """
name: data-test
model: pi05
workload: {batch_size: 2, cameras: 2, text_tokens: 64, action_horizon: 8, warmup_steps: 1, timed_steps: 3,
           seed: 0, dtype: fp32, data: {dataset: DATASET}}
ladder:
  - {name: community-loader, options: {camera_slots: auto, recompute: none}, loader: {kind: torch, workers: 1}}
  - {name: async-input, loader: {kind: async, workers: 1}}
  - {name: synthetic-data, loader: {kind: synthetic}}
targets:
  cpu: {model_size: tiny}
"""


@pytest.mark.slow
def test_ladder_on_a_dataset_records_data_wait_and_loss_parity(dataset, tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.replace("DATASET", str(dataset)))
    out = tmp_path / "r.json"
    assert main(["run", str(scenario), "--target", "cpu", "--repeats", "1", "--out", str(out)]) == 0, (
        capsys.readouterr().err
    )
    rungs = {r["name"]: r for r in load_result(out)["rungs"]}
    sync, asynchronous, synthetic = rungs["community-loader"], rungs["async-input"], rungs["synthetic-data"]
    for r in (sync, asynchronous):
        assert len(r["data_wait_s"]) == 3 and 0 <= r["data_wait_share"] < 1
        assert r["data"]["frames"] > 0 and r["processor"]["tokenizer"].startswith("stand-in")
        assert r["data"]["content"] == dataset_fingerprint(dataset)  # what the rung read, digested
    assert asynchronous["loader"]["kind"] == "async" and sync["loader"]["kind"] == "torch"
    # the same batches, so the same losses: fp32 and the same kernels, to the last bit
    assert asynchronous["losses"] == sync["losses"] and asynchronous["loss_parity"]["pass"]
    assert synthetic["data"] == "synthetic" and synthetic["loss_parity"] is None
    assert "other batches" in synthetic["loss_parity_note"]
    table = capsys.readouterr().out
    assert "async loader: waited" in table and "torch loader: waited" in table


def test_profile_data_only_times_the_rungs_input_pipeline_alone(dataset, tmp_path, capsys):
    """`vlabench profile --data-only`: no model, the rung's batches back to back after its queues are drained (one
    worker x prefetch 2, and the async loader's 2 buffers), the rate over the window from the batches' times."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.replace("DATASET", str(dataset)))
    for rung, queued in (("community-loader", 2), ("async-input", 4)):
        out = tmp_path / f"{rung}.json"
        args = ["profile", str(scenario), "--target", "cpu", "--rung", rung, "--data-only", "--batches", "3"]
        assert main([*args, "--out", str(out)]) == 0, capsys.readouterr().err
        r = json.loads(out.read_text())
        assert r["rung"] == rung and r["batches"] == 3 and len(r["batch_s"]) == 3
        assert r["warmup_batches"] == 1 + queued and r["loader"]["workers"] == 1
        assert r["samples_per_s"] == pytest.approx(2 * 3 / sum(r["batch_s"]))
        assert "losses" not in r and "kernels" not in r  # nothing stepped
        assert "the input pipeline alone" in capsys.readouterr().out
    base = ["profile", str(scenario), "--target", "cpu", "--data-only", "--rung"]
    assert main([*base, "synthetic-data"]) == 2
    assert "synthetic-data reads synthetic batches" in capsys.readouterr().err
    assert main([*base, "community-loader", "--synthetic"]) == 2
    assert "--synthetic has none" in capsys.readouterr().err


def test_a_missing_dataset_is_one_line_before_any_rung_runs(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.replace("DATASET", str(tmp_path / "nowhere")))
    assert main(["run", str(scenario), "--target", "cpu", "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nowhere: expected a LeRobotDataset v3.0 folder (make one: " in err
    assert not (tmp_path / "r.json").exists()


def test_a_missing_dataset_with_data_make_is_made_first(tmp_path, monkeypatch):
    """`data.make` (the scenarios' synthetic datasets): a missing folder is made as `vlabench make-dataset` makes
    it, with a line saying so, before any rung; an existing one is used as it is."""
    from harness.data.dataset import LeRobotV3Dataset
    from harness.ladder.runner import check_dataset
    from harness.scenario import load_scenario

    monkeypatch.chdir(tmp_path)
    make = "{source: synthetic, episodes: 2, seed: 3, image_size: 32}"
    (tmp_path / "s.yaml").write_text(SCENARIO.replace("DATASET", f"runs/ds, make: {make}"))
    scenario = load_scenario(tmp_path / "s.yaml")
    workload = scenario.workload_for("cpu")
    lines = []
    check_dataset(scenario, workload, scenario.rung_names(), lines.append)
    assert lines[0] == (
        "runs/ds: no dataset there yet; making it as data.make says: "
        "vlabench make-dataset --source synthetic --episodes 2 --seed 3 --image-size 32 --out runs/ds"
    )
    assert lines[-1].startswith("wrote 2 episodes, ") and lines[-1].endswith("waiting for the episodes): runs/ds")
    # the same dataset as the command makes
    made = LeRobotV3Dataset(tmp_path / "runs/ds", action_horizon=4)
    assert main(["make-dataset", "--source", "synthetic", "--episodes", "2", "--seed", "3", "--image-size", "32",
                 "--out", str(tmp_path / "cmd")]) == 0  # fmt: skip
    by_command = LeRobotV3Dataset(tmp_path / "cmd", action_horizon=4)
    assert len(made) == len(by_command) and made.meta.tasks == by_command.meta.tasks
    for i in (0, len(made) - 1):
        a, b = made[i], by_command[i]
        assert torch.equal(torch.as_tensor(a["action"]), torch.as_tensor(b["action"]))
        assert torch.equal(
            torch.as_tensor(a["observation.images.image"]), torch.as_tensor(b["observation.images.image"])
        )
    lines.clear()
    check_dataset(scenario, workload, scenario.rung_names(), lines.append)  # now there: nothing made
    assert lines == []


def test_a_dataset_named_on_the_command_line_is_never_made(tmp_path, capsys):
    """--dataset replaces the scenario's dataset and its `make`: a mistyped path is an error, not a new dataset."""
    scenario = tmp_path / "s.yaml"
    make = "{source: synthetic, episodes: 1, image_size: 32}"
    scenario.write_text(SCENARIO.replace("DATASET", f"{tmp_path / 'made'}, make: {make}"))
    args = ["run", str(scenario), "--target", "cpu", "--dataset", str(tmp_path / "typo"), "--out", str(tmp_path / "r")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "typo: expected a LeRobotDataset v3.0 folder" in err
    assert not (tmp_path / "typo").exists() and not (tmp_path / "made").exists()


@pytest.mark.slow
def test_the_data_scenario_runs_on_a_fresh_cpu_machine(dataset, tmp_path, capsys):
    """The documented flow: make a dataset, run scenarios/pi05-data.yaml on the cpu target with --dataset."""
    made = tmp_path / "made"
    assert (
        main(["make-dataset", "--source", "synthetic", "--episodes", "3", "--image-size", "64", "--out", str(made)])
        == 0
    )
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "run",
                str(ROOT / "scenarios/pi05-data.yaml"),
                "--target",
                "cpu",
                "--dataset",
                str(made),
                "--repeats",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    ), capsys.readouterr().err
    result = json.loads(out.read_text())
    assert [r["status"] for r in result["rungs"]] == ["ok", "ok", "ok"]
    assert result["workload"]["data"]["dataset"] == str(made)
