"""GR00T N1.6's input processing (models/gr00t/processor.py): the chat-template prompt, min/max normalisation,
images, training batches shaped like the synthetic ones, the data path through both loaders, tokenizer files
and a checkpoint's processor files (CPU, tiny)."""

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from models.gr00t import FAMILY, FULL, SIZES, TINY, parse_options
from models.gr00t.batch import make_batches
from models.gr00t.processor import (
    QWEN_SPECIAL,
    Gr00tProcessor,
    checkpoint_processing,
    load_tokenizer,
    make_processor,
    min_max,
    special_ids,
)
from models.normalize import Normalizer
from models.tokenizers import StandInTokenizer
from models.workload import Workload

CAMERAS = ("observation.images.image", "observation.images.wrist_image")
WORKLOAD = Workload(batch_size=2, cameras=2, text_tokens=50, action_horizon=6, lr=1e-4, model_size="tiny", dtype="fp32")
STATS = {
    "observation.state": {"min": np.full(8, -1.0), "max": np.full(8, 1.0), "mean": np.zeros(8)},
    "action": {"min": np.full(7, -2.0), "max": np.full(7, 2.0)},
}


class Recording:
    """A tokenizer that records the text it is asked to encode (one token per character)."""

    name = "recording"

    def __init__(self):
        self.parts = []

    def encode(self, text, add_bos=False):
        self.parts.append(text)
        return [3 + ord(c) % 100 for c in text]


def sample(i, horizon=6, size=64):
    rng = np.random.default_rng(i)
    frame = lambda: torch.from_numpy(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))  # noqa: E731
    return {
        CAMERAS[0]: frame(),
        CAMERAS[1]: frame(),
        "observation.state": torch.randn(8),
        "action": torch.from_numpy(rng.normal(size=(horizon, 7)).astype(np.float32)),
        "action_is_pad": torch.zeros(horizon, dtype=torch.bool),
        "task": f"Pick up the black bowl, #{i}!",
    }


def test_prompt_is_eagles_chat_template_with_the_text_before_the_images():
    tok = Recording()
    proc = Gr00tProcessor(tok, special_ids(TINY), image_size=56)
    ids = proc.prompt_ids("Put the BOWL on the plate.", views=2)
    assert tok.parts == [
        "system\nYou are a helpful assistant.",
        "\n",
        "user\nput the bowl on the plate<image 1>",
        "<image 2>",
        "\n",
    ]
    sp = special_ids(TINY)
    image = [sp["<img>"]] + [TINY.image_token_id] * 4 + [sp["</img>"]]  # 56x56: 4 tokens per view
    assert ids[0] == sp["<|im_start|>"] and ids[-2] == sp["<|im_end|>"]
    # ... <img> 4 x <IMG_CONTEXT> </img> "<image 2>" (9 characters) <img> ... </img> <|im_end|> "\n"
    assert ids.count(TINY.image_token_id) == 8 and ids[-8:-2] == image and ids[-23:-17] == image
    full = Gr00tProcessor(StandInTokenizer(151643), special_ids(FULL))
    assert full.image_tokens == 64 and full.prompt_ids("x", 2).count(FULL.image_token_id) == 128


def test_special_ids_and_the_stand_in_vocabulary():
    assert special_ids(FULL) == {**QWEN_SPECIAL, "<IMG_CONTEXT>": 151669, "<|endoftext|>": 151643}
    tiny = special_ids(TINY)
    assert max(tiny.values()) < TINY.llm.vocab and len(set(tiny.values())) == 6
    # the stand-in never produces a special id: its vocabulary ends where the special tokens start
    assert load_tokenizer(None, FULL).vocab == 151643 and load_tokenizer(None, TINY).vocab == min(tiny.values())
    proc = make_processor(TINY, STATS, None)
    ids, mask = proc.tokenize(["a b c d e f g h", "a"], views=2)
    assert (ids[~mask] == TINY.pad_token_id).all() and mask[:, -1].all() and not mask[1, 0]  # left padding
    text = ids[mask & (ids < min(tiny.values()))]
    assert len(text) > 0 and (text >= 3).all()


def test_min_max_normalisation_as_n16():
    norm = min_max({"min": [0.0, 1.0, -1.0], "max": [2.0, 1.0, 1.0]}, "state")
    x = np.array([[1.0, 5.0, 3.0], [0.0, 1.0, -1.0]])
    assert np.allclose(norm.normalize(x), [[0.0, 0.0, 1.0], [-1.0, 0.0, -1.0]])  # constant dim 0, clipped
    assert np.allclose(norm.unnormalize(np.array([[2.0, 0.5, 0.0]])), [[2.0, 1.0, 0.0]])  # clipped first
    y = np.array([[0.3, 1.0, -0.2]])
    assert np.allclose(norm.unnormalize(norm.normalize(y))[:, [0, 2]], y[:, [0, 2]])
    q = min_max({"q01": [0.0], "q99": [4.0], "min": [-9.0], "max": [9.0]}, "a", percentiles=True)
    assert q.normalize(np.array([1.0])) == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="action: min_max normalisation needs min, max, the statistics have mean"):
        min_max({"mean": [0.0]}, "action")
    assert Normalizer().mode == "identity" and np.array_equal(Normalizer().normalize(x), x)


def test_images_letterboxed_resized_and_normalised():
    proc = Gr00tProcessor(Recording(), special_ids(TINY), image_size=56)
    frames = torch.zeros((1, 2, 56, 56, 3), dtype=torch.uint8)
    frames[0, 1] = 255
    images = proc.images(frames)
    assert images.shape == (1, 2, 3, 56, 56) and (images[0, 0] == -1).all() and (images[0, 1] == 1).all()
    wide = torch.full((1, 1, 28, 56, 3), 255, dtype=torch.uint8)  # letterboxed to 56x56 with black bars
    out = proc.images(wide)[0, 0, 0]
    assert (out[:14] == -1).all() and (out[14:42] == 1).all() and (out[42:] == -1).all()
    big = proc.images(torch.full((1, 1, 64, 64, 3), 128, dtype=torch.uint8))
    assert big.shape[-1] == 56 and torch.allclose(big, torch.full_like(big, 128 / 127.5 - 1), atol=1e-6)


def test_training_batch_is_what_the_model_consumes():
    proc = FAMILY.data_processor("tiny", WORKLOAD, STATS, None)
    samples = [sample(0), sample(1)]
    batch = proc.training_batch(samples, CAMERAS, torch.Generator().manual_seed(3))
    synthetic = make_batches(TINY, WORKLOAD, 1, "cpu", torch.float32, 0)[0]
    assert batch.keys() == synthetic.keys()
    for key, value in synthetic.items():
        assert batch[key].dtype == value.dtype and batch[key].shape[0] == value.shape[0], key
        if key not in ("input_ids", "attention_mask"):  # the prompt length follows the instruction
            assert batch[key].shape == value.shape, key
    expected = np.clip(samples[1]["action"].numpy() / 2.0, -1, 1)  # min -2, max 2 -> [-1, 1]
    assert torch.allclose(batch["actions"][1, :, :7], torch.from_numpy(expected).float(), atol=1e-6)
    assert (batch["actions"][..., 7:] == 0).all() and (batch["action_mask"][..., :7] == 1).all()
    assert (batch["action_mask"][..., 7:] == 0).all() and (batch["state"][:, :, 8:] == 0).all()
    assert batch["embodiment_id"].tolist() == [2, 2]
    again = proc.training_batch(samples, CAMERAS, torch.Generator().manual_seed(3))
    assert all(torch.equal(batch[k], again[k]) for k in batch)
    gen = torch.Generator().manual_seed(3)  # the draws in batch.py's order: noise, then the Beta draw
    assert torch.equal(batch["noise"], torch.randn((2, 6, 16), generator=gen))
    # the model trains on it, and VL padding (the CUDA-graph rung's fixed length) keeps the loss
    losses = []
    for options in ({}, {"vl_pad": 64}):
        model = FAMILY.build("tiny", parse_options(options), WORKLOAD, "cpu", torch.float32, 0).model
        torch.manual_seed(0)
        losses.append(FAMILY.loss(model, batch))
    assert torch.isfinite(losses[0]) and abs(losses[0] - losses[1]) / losses[0] < 1e-5


def test_missing_statistics_are_one_line():
    with pytest.raises(ValueError, match="observation.state: min_max normalisation needs min, max"):
        FAMILY.data_processor("tiny", WORKLOAD, {"action": STATS["action"]}, None)


def test_both_loaders_and_both_preprocess_places_give_the_same_batches(tmp_path):
    """torch and async loaders, and the preprocessing in the training process or (as Isaac-GR00T's collator
    does it) in 0 or 2 worker processes with the images made float32 there: the same batches, draws included."""
    from harness.data import lerobot_format as fmt
    from harness.data.pipeline import DatasetFeed, DataSpec, LoaderOptions
    from harness.data.synthetic import synthetic_episodes
    from harness.data.writer import write_dataset

    root = tmp_path / "libero-synthetic"
    write_dataset(root, synthetic_episodes(2, seed=1, image_size=64, lengths=(12, 16)), fmt.libero_features(64))
    loaders = [
        LoaderOptions(kind="torch", workers=0),
        LoaderOptions(kind="async", workers=0),
        LoaderOptions(kind="torch", workers=0, preprocess="workers"),
        LoaderOptions(kind="torch", workers=2, preprocess="workers", pin_memory=True),
        LoaderOptions(kind="async", workers=2, preprocess="workers"),
    ]
    feeds = [
        DatasetFeed(
            DataSpec(dataset=str(root)),
            options,
            FAMILY,
            "tiny",
            replace(WORKLOAD, action_horizon=4),
            torch.device("cpu"),
            torch.float32,
            seed=0,
            start=1,  # a resumed run: the workers' batch index counts from the start
        )
        for options in loaders
    ]
    try:
        for i in range(3):
            first, *others = (f.fetch(i)[0] for f in feeds)
            for other in others:
                assert first.keys() == other.keys() and all(torch.equal(first[k], other[k]) for k in first)
        assert first["images"].shape == (2, 2, 3, 56, 56) and first["actions"].shape == (2, 4, 16)
        described = [f.describe() for f in feeds]
        assert described[0]["processor"]["state_norm"] == "min_max"
        assert described[0]["loader"]["preprocess"] == "host" and described[3]["loader"]["preprocess"] == "workers"
        # the workers prepared it: nothing is timed on the host
        assert "prepare_ms" in described[0] and "prepare_ms" not in described[3]
    finally:
        for f in feeds:
            f.close()


def test_workers_ship_float32_images():
    processor = FAMILY.data_processor("tiny", WORKLOAD, STATS, None)
    frames = torch.randint(0, 256, (2, 2, 64, 64, 3), dtype=torch.uint8)
    shipped = processor.host_finish({"frames": frames, "state": torch.zeros(2, 1, 16)})
    assert "frames" not in shipped and shipped["images"].dtype == torch.float32
    on_device = processor.finish({"frames": frames, "state": torch.zeros(2, 1, 16)}, torch.bfloat16)
    from_workers = processor.finish(shipped, torch.bfloat16)
    assert from_workers["images"].dtype == torch.bfloat16 and torch.equal(from_workers["images"], on_device["images"])


def test_tokenizer_json(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"[UNK]": 0, "put": 5, "the": 6, "bowl": 7}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    for spec in (tmp_path / "tokenizer.json", tmp_path):  # the file, or a folder holding it
        loaded = load_tokenizer(str(spec), TINY)
        assert loaded.encode("put the bowl") == [5, 6, 7] and loaded.name.endswith("tokenizer.json")
    with pytest.raises(ValueError, match="expected a Qwen tokenizer.json file"):
        load_tokenizer(str(tmp_path / "tokenizer.model"), TINY)


def test_checkpoint_processor_files(tmp_path):
    groups = {"x": 1, "y": 1, "z": 1, "roll": 1, "pitch": 1, "yaw": 1, "gripper": 2}
    state = {g: {"min": [-1.0] * n, "max": [1.0] * n, "q01": [0.0] * n, "q99": [0.5] * n} for g, n in groups.items()}
    action = {g: {"min": [-2.0], "max": [2.0], "q01": [0.0], "q99": [0.5]} for g in groups}
    (tmp_path / "statistics.json").write_text(json.dumps({"libero_panda": {"state": state, "action": action}}))
    (tmp_path / "processor_config.json").write_text(
        json.dumps(
            {
                "processor_kwargs": {
                    "use_percentiles": False,
                    "modality_configs": {"libero_panda": {"action": {"delta_indices": list(range(16))}}},
                }
            }
        )
    )
    (tmp_path / "embodiment_id.json").write_text(json.dumps({"libero_panda": 3}))
    (tmp_path / "config.json").write_text(json.dumps({"action_horizon": 50}))
    meta = checkpoint_processing(tmp_path)
    assert (meta.horizon, meta.steps, meta.embodiment_id) == (50, 16, 3)
    assert meta.state_norm.low.tolist() == [-1.0] * 8 and meta.action_norm.high.tolist() == [2.0] * 7
    assert meta.stats_source.endswith("statistics.json")
    empty = checkpoint_processing(tmp_path / "missing")
    assert empty.state_norm.mode == "identity" and empty.stats_source is None
    (tmp_path / "statistics.json").write_text(json.dumps({"gr1": {}}))
    with pytest.raises(ValueError, match="no statistics for libero_panda"):
        checkpoint_processing(tmp_path)


def test_sizes_agree_with_the_model_config():
    for cfg in SIZES.values():
        proc = make_processor(cfg, None, None)
        assert proc.image_tokens == cfg.vision.tokens and proc.image_size == cfg.vision.image_size
