"""What training's checkpoints rest on: weights under plain names whatever the rung's options, a policy folder the
evaluation loads with the preprocessing training used, gradient accumulation, and feeds that start mid-run."""

import itertools
from dataclasses import replace

import numpy as np
import pytest
import torch

from harness.data.pipeline import EpochPermutations
from harness.train.setup import accumulating_step
from models import get_family
from models.family import standard_step
from models.workload import Workload

WORKLOAD = Workload(
    batch_size=4,
    cameras=2,
    text_tokens=48,
    action_horizon=10,
    lr=1e-3,
    dtype="fp32",
    model_size="tiny",
    compile_backend="aot_eager",
)
FAMILY = get_family("pi05")


def build(options: dict, seed: int = 0):
    return FAMILY.build("tiny", FAMILY.parse_options(options), WORKLOAD, "cpu", torch.float32, seed).model


@pytest.mark.parametrize(
    "options",
    [
        {"recompute": "nested-full", "fused_qkv": True, "fused_gate_up": True},
        {"recompute": {"patterns": ["vision.layers.*", "backbone.layers.*.prefix.mlp"]}},
        {"recompute": "none", "compile": "per-layer"},
    ],
)
def test_weights_round_trip_through_plain_names_whatever_the_options(options):
    plain = FAMILY.export_weights(build({"recompute": "none"}))
    model = build(options, seed=1)
    model.load_state_dict(FAMILY.import_weights(model, plain), strict=True)
    back = FAMILY.export_weights(model)
    assert back.keys() == plain.keys() and all(torch.equal(back[k], plain[k]) for k in plain)
    assert len(FAMILY.time_conditioning_parameters(model)) == 2 * 3 * 2 + 2 + 4  # adaRMS denses, final, time MLP


def test_a_written_policy_loads_in_the_evaluation_with_trainings_preprocessing(tmp_path):
    pytest.importorskip("safetensors")
    from models.pi05.policy import Pi05Policy

    model = build({"recompute": "none", "fused_qkv": True})
    plain = FAMILY.export_weights(model)
    rng = np.random.default_rng(0)
    stats = {
        "observation.state": {"q01": rng.uniform(-1, 0, 8), "q99": rng.uniform(0.5, 1, 8), "mean": np.zeros(8)},
        "action": {"q01": rng.uniform(-1, 0, 7), "q99": rng.uniform(0.5, 1, 7)},
    }
    FAMILY.save_policy(tmp_path, plain, "tiny", WORKLOAD, stats, "bytes", {"step": 7})
    policy = Pi05Policy(str(tmp_path), device="cpu", dtype="fp32")
    loaded = FAMILY.export_weights(policy.model)
    assert all(torch.equal(loaded[k], plain[k]) for k in plain)
    assert policy.meta.layout == "lerobot" and policy.meta.horizon == WORKLOAD.action_horizon
    train = FAMILY.data_processor("tiny", WORKLOAD, stats, "bytes")
    state, task = rng.uniform(-1, 1, 8).astype(np.float32), "put the bowl on the plate"
    # the prompt the evaluation builds is the one training built (tokenizer, state normalisation and bins)
    assert policy.processor.prompt_tokens(task, state) == train.prompt_tokens(task, state)
    assert policy.processor.max_tokens == train.max_tokens and policy.processor.image_size == train.image_size
    actions = rng.uniform(-1, 1, (10, 32))
    expected = train.action_norm.unnormalize(actions[:, :7])
    assert np.allclose(policy.processor.actions_out(actions, 7), expected, atol=1e-6)  # float32 stats on disk


def test_accumulated_micro_batches_update_as_one_batch():
    torch.manual_seed(0)
    options = FAMILY.parse_options({"recompute": "none", "camera_slots": "auto"})
    batch = FAMILY.make_batches("tiny", WORKLOAD, 1, "cpu", torch.float32, 0)[0]
    halves = [{k: v[i : i + 2] for k, v in batch.items()} for i in (0, 2)]
    one, two = build({}), build({})
    step_one = standard_step(FAMILY.loss, one, FAMILY.optimizer(one, options, WORKLOAD, "cpu"))
    step_two = accumulating_step(FAMILY, two, FAMILY.optimizer(two, options, WORKLOAD, "cpu"), clip=1.0)
    loss_one, loss_two = step_one(batch), step_two(halves)
    assert loss_two.item() == pytest.approx(loss_one.item(), rel=1e-5)
    for (name, a), b in zip(one.named_parameters(), two.parameters()):
        assert torch.allclose(a, b, atol=1e-6), name


@pytest.mark.parametrize("skip", [0, 3, 10, 23])
def test_a_feed_started_mid_run_draws_what_an_uninterrupted_one_draws(skip):
    full = list(itertools.islice(iter(EpochPermutations(10, seed=3)), 40))
    resumed = list(itertools.islice(iter(EpochPermutations(10, seed=3, skip=skip)), 40 - skip))
    assert resumed == full[skip:]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    from harness.cli import main

    out = tmp_path_factory.mktemp("data") / "ds"
    argv = ["make-dataset", "--source", "synthetic", "--episodes", "1", "--image-size", "32", "--out", str(out)]
    assert main(argv) == 0
    return str(out)


@pytest.mark.parametrize("kind", ["torch", "async"])
def test_a_dataset_feed_started_at_batch_n_gives_batch_n_of_an_uninterrupted_feed(dataset, kind):
    from harness.data.pipeline import DatasetFeed, DataSpec, LoaderOptions

    workload = replace(WORKLOAD, batch_size=2, text_tokens=32)

    def batches(start: int, n: int) -> list[dict]:
        feed = DatasetFeed(
            DataSpec(dataset=dataset, tokenizer="bytes"),
            LoaderOptions(kind=kind, workers=0),
            FAMILY,
            "tiny",
            workload,
            torch.device("cpu"),
            torch.float32,
            seed=5,
            start=start,
        )
        try:
            return [feed.fetch(start + i)[0] for i in range(n)]
        finally:
            feed.close()

    full, resumed = batches(0, 4), batches(3, 1)
    assert full[3].keys() == resumed[0].keys()
    for key, value in resumed[0].items():
        assert torch.equal(value, full[3][key]), key  # the same samples, noise and flow time
