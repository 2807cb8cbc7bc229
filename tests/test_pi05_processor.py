"""Pi0.5's input processing (models/pi05/processor.py), shared by LIBERO evaluation and the data path:
normalisation conventions, prompts of both checkpoint layouts, images, training batches, tokenizers."""

import time

import numpy as np
import pytest
import torch

from models.normalize import Normalizer
from models.pi05.processor import Pi05Processor, discretize_state, resize_with_pad
from models.tokenizers import ByteTokenizer, StandInTokenizer


def decode(ids):
    return bytes(t - 3 for t in ids).decode()


def test_normalizers_of_both_conventions():
    q01, q99 = np.array([-2.0, 0.0]), np.array([2.0, 0.0])
    openpi = Normalizer("quantile", q01, q99, 1e-6, eps_always=True)
    lerobot = Normalizer("quantile", q01, q99, 1e-8, eps_always=False)
    x = np.array([1.0, 0.0])
    assert np.allclose(openpi.normalize(x), [(1 + 2) / (4 + 1e-6) * 2 - 1, (0 - 0) / 1e-6 * 2 - 1])
    assert np.allclose(lerobot.normalize(x)[0], 0.5)
    for norm in (openpi, lerobot, Normalizer("mean_std", np.array([1.0]), np.array([2.0]), 1e-8, False)):
        y = np.array([[0.3, -0.2]])[..., : len(norm.low)]
        assert np.allclose(norm.unnormalize(norm.normalize(y)), y, atol=1e-6)
    assert np.array_equal(Normalizer().normalize(x), x)
    assert list(discretize_state(np.array([-1.0, 0.0, 0.999]))) == [0, 128, 255]
    with pytest.raises(ValueError, match="state: quantile normalisation needs q01, q99, the statistics have mean"):
        Normalizer.from_stats("quantile", {"mean": [0]}, what="state")


def test_prompts_of_both_layouts():
    state = np.array([1.0] * 8)
    openpi = Pi05Processor(ByteTokenizer(512), state_in_prompt=False, state_pad=None)
    assert decode(openpi.prompt_tokens("pick_up the bowl\n", state)[1:]) == "pick up the bowl\n"
    lerobot = Pi05Processor(ByteTokenizer(512), state_pad=32)
    ids = lerobot.prompt_tokens("pick up the bowl", state)
    assert ids[0] == 2  # BOS
    assert decode(ids[1:]) == "Task: pick up the bowl, State: " + " ".join(["255"] * 8 + ["128"] * 24) + ";\nAction: "
    tokens, masks = Pi05Processor(ByteTokenizer(512), max_tokens=20).tokenize(["a", "bb"], [state, state])
    assert tokens.shape == masks.shape == (2, 20) and masks.all()  # long prompts are cut at max_tokens
    tokens, masks = openpi.tokenize(["a"], [state])
    assert masks.sum() == 3 and (tokens[0, 3:] == 0).all()  # BOS, "a", "\n", then padding


def test_images_resize_with_pad_and_scale():
    square = torch.rand(1, 3, 256, 256) * 2 - 1
    assert resize_with_pad(square, 224).shape == (1, 3, 224, 224)
    wide = torch.ones(1, 3, 100, 200)
    out = resize_with_pad(wide, 224)
    assert (out[0, :, 112, :] == 1).all() and (out[0, :, 0, :] == -1).all() and (out[0, :, -1, :] == -1).all()
    assert ((out[0, 0] == 1).all(dim=1)).sum() == 112  # 200x100 -> 224x112, centred
    pixels = np.zeros((2, 2, 256, 256, 3), dtype=np.uint8)
    pixels[0, 1] = 255
    images = Pi05Processor(ByteTokenizer(512)).images(pixels)
    assert images.shape == (2, 2, 3, 224, 224)
    assert images[0, 0].max() == -1 and images[0, 1].min() == 1


def sample(i, horizon=4, pad_from=None):
    rng = np.random.default_rng(i)
    pad = np.zeros(horizon, dtype=bool) if pad_from is None else np.arange(horizon) >= pad_from
    return {
        "image": rng.integers(0, 255, (64, 64, 3), dtype=np.uint8),
        "wrist_image": rng.integers(0, 255, (64, 64, 3), dtype=np.uint8),
        "observation.state": rng.normal(size=8).astype(np.float32),
        "action": rng.normal(size=(horizon, 7)).astype(np.float32),
        "action_is_pad": pad,
        "task": f"task {i}",
    }


def test_training_batch_normalises_pads_and_draws_from_the_generator():
    norm = Normalizer("quantile", np.full(7, -2.0), np.full(7, 2.0))
    proc = Pi05Processor(ByteTokenizer(512), max_tokens=64, image_size=56, action_dim=32, action_norm=norm)
    samples = [sample(0), sample(1, pad_from=2)]
    batch = proc.training_batch(samples, ("image", "wrist_image"), torch.Generator().manual_seed(3))
    assert batch["images"].shape == (2, 2, 3, 56, 56) and batch["tokens"].shape == (2, 64)
    assert batch["actions"].shape == (2, 4, 32) and (batch["actions"][..., 7:] == 0).all()
    expected = torch.tensor(norm.normalize(samples[1]["action"].astype(np.float64)), dtype=torch.float32)
    assert torch.allclose(batch["actions"][1, :, :7], expected)
    assert batch["action_is_pad"].tolist() == [[False] * 4, [False, False, True, True]]
    again = proc.training_batch(samples, ("image", "wrist_image"), torch.Generator().manual_seed(3))
    assert torch.equal(batch["noise"], again["noise"]) and torch.equal(batch["time"], again["time"])
    assert ((batch["time"] > 0.001 - 1e-7) & (batch["time"] <= 1.0)).all()


def test_stand_in_tokenizer_costs_about_what_a_real_one_does():
    tok = StandInTokenizer(257152)
    prompt = "Task: put the black bowl on the plate, State: " + " ".join(["128"] * 32) + ";\nAction: "
    ids = tok.encode(prompt, add_bos=True)
    assert ids == tok.encode(prompt, add_bos=True) and all(3 <= i < 257152 for i in ids[1:]) and ids[0] == 2
    # SentencePiece gives PaliGemma ~1 token per word and ~1-3 per number: the same ballpark
    assert 60 <= len(ids) <= 160
    start = time.perf_counter()
    for _ in range(200):
        tok.encode(prompt)
    assert (time.perf_counter() - start) / 200 < 2e-3  # well under a millisecond per prompt
