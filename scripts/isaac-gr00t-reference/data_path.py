"""Isaac-GR00T N1.6's own training data path over a vlabench LeRobot dataset: their dataset classes, video decode,
training transforms, Eagle processing, collator and DataLoader, called at run time from .isaac/ (prepare.sh).

Paths and lines are Isaac-GR00T at the N1.6 release (4e62473), as prepare.sh extracts it.

What their fine-tuning builds, and what is built here the same way:
- The dataset (`gr00t/data/dataset/factory.py:41-76`): `generate_stats` and `generate_rel_stats`, one
  `ShardedSingleStepDataset` per path (shard_size 2**10, episode_sampling_rate 0.1, seed 42, allow_padding False:
  `gr00t/configs/data/data_config.py:56-72`) in a `ShardedMixtureDataset` (training, 1e5 shards per epoch). The
  factory's `torch.distributed.barrier()` (`factory.py:48`) needs a process group; one process needs none, so
  the two classes are built directly with the factory's arguments.
- The processor (`gr00t/model/gr00t_n1d6/setup.py:147-167`, the branch without a checkpoint: the base checkpoint's
  processor files are not in the repository) from the model config, with LIBERO's modality config
  (`gr00t/configs/data/embodiment_configs.py:91-124`) and the LIBERO scripts' colour jitter
  (`examples/LIBERO/finetune_libero_*.sh:20`); its collator is `Gr00tN1d6DataCollator`.
- The DataLoader (`gr00t/experiment/trainer.py:227-242`): the collator, `num_workers` 4 (the LIBERO scripts'
  `--dataloader_num_workers 4`; the config's default is 2, `gr00t/configs/finetune_config.py:74`),
  `pin_memory` True (transformers' default; `gr00t/experiment/experiment.py:191-221` never sets it),
  persistent workers, the `fork` context (`data_config.py:71`).

What it reads, and the least change that gives it that:
- LeRobot v2.1, not v3.0 (`gr00t/data/dataset/lerobot_episode_loader.py:130-182`): `meta/episodes.jsonl`,
  `meta/tasks.jsonl`, one parquet file and one MP4 per camera per episode, named by `data_path` and `video_path`
  in `meta/info.json` with `{episode_chunk}` and `{episode_index}` (`:298-303`, `:366-369`). vlabench writes
  v3.0 (harness/data/lerobot_format.py): many episodes per data file and per MP4. `to_v21` rewrites a copy:
  each episode's rows into its own parquet file, and each episode's packets remuxed into its own MP4 (the same
  AV1 bitstream, no re-encoding: every episode starts with a key frame), `stats.json` and the features as they
  are.
- `meta/modality.json` (`:159-162`): their `examples/LIBERO/modality.json`, copied into `meta/` as their LIBERO
  README says.
- Video: their default backend is torchcodec (`data_config.py:80`), which decodes every frame of an episode
  (`lerobot_episode_loader.py:482`, `gr00t/utils/video_utils.py:271-277`). The device image has neither
  torchcodec nor decord, only PyAV (FFmpeg's dav1d decoder, as torchcodec would use). `PyAVVideoDecoder`
  stands in for `torchcodec.decoders.VideoDecoder` with what `video_utils.py` calls of it: NHWC RGB uint8
  frames at the indices, FFmpeg's threads left to FFmpeg (`num_ffmpeg_threads=0` there).

CPU check (this file's main): `python scripts/isaac-gr00t-reference/data_path.py --dataset PATH`; see
docs/gr00t.md.
"""

from __future__ import annotations

import argparse
import builtins
import json
import shutil
import sys
import time
import types
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / ".isaac"
V21_DATA = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V21_VIDEO = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
LIBERO_JITTER = {"brightness": 0.3, "contrast": 0.4, "saturation": 0.5, "hue": 0.08}  # finetune_libero_*.sh:20
EMBODIMENT = "libero_panda"
WORKERS = 4


# --- LeRobot v3.0 -> v2.1 ---------------------------------------------------------------------------------


def remux(src: Path, dst: Path, start_s: float, end_s: float) -> int:
    """The packets of `src` in [start_s, end_s) into `dst`, timestamps shifted to start at 0; returns how many."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with av.open(str(src)) as inp, av.open(str(dst), "w", options={"movflags": "faststart"}) as out:
        stream = inp.streams.video[0]
        stream_out = out.add_stream_from_template(stream, opaque=True)
        stream_out.time_base = stream.time_base
        first, last = (round(Fraction(t) / stream.time_base) for t in (start_s, end_s))
        for packet in inp.demux(stream):
            if packet.dts is None or not first <= packet.pts < last:
                continue
            packet.pts -= first
            packet.dts -= first
            packet.stream = stream_out
            out.mux(packet)
            n += 1
    return n


def to_v21(src: Path, dst: Path, modality_json: Path) -> Path:
    """A LeRobot v2.1 copy of the v3.0 dataset `src` at `dst`, as Isaac-GR00T's loader reads it."""
    info = json.loads((src / "meta/info.json").read_text())
    chunks = info["chunks_size"]
    cameras = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    tasks = pq.read_table(src / "meta/tasks.parquet").to_pylist()  # task_index and the task (pandas' index)
    task_of = {t["task_index"]: t.get("task", t.get("__index_level_0__")) for t in tasks}
    episodes = []
    for path in sorted((src / "meta/episodes").glob("chunk-*/file-*.parquet")):
        episodes += pq.read_table(path).to_pylist()
    if dst.exists():
        shutil.rmtree(dst)
    (dst / "meta").mkdir(parents=True)
    data_files: dict[tuple, object] = {}
    for ep in episodes:
        index, chunk = ep["episode_index"], ep["episode_index"] // chunks
        key = (ep["data/chunk_index"], ep["data/file_index"])
        if key not in data_files:
            data_files[key] = pq.read_table(src / info["data_path"].format(chunk_index=key[0], file_index=key[1]))
        table = data_files[key]
        rows = table.filter(pc.equal(table["episode_index"], index))
        out = dst / V21_DATA.format(episode_chunk=chunk, episode_index=index)
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, out)
        for camera in cameras:
            mp4 = src / info["video_path"].format(
                video_key=camera,
                chunk_index=ep[f"videos/{camera}/chunk_index"],
                file_index=ep[f"videos/{camera}/file_index"],
            )
            start, end = ep[f"videos/{camera}/from_timestamp"], ep[f"videos/{camera}/to_timestamp"]
            target = dst / V21_VIDEO.format(episode_chunk=chunk, video_key=camera, episode_index=index)
            if remux(mp4, target, start, end) != ep["length"]:
                raise ValueError(f"{mp4}: episode {index} did not remux to {ep['length']} frames")
    lines = lambda rows: "".join(json.dumps(r) + "\n" for r in rows)  # noqa: E731
    (dst / "meta/episodes.jsonl").write_text(
        lines({"episode_index": e["episode_index"], "tasks": list(e["tasks"]), "length": e["length"]} for e in episodes)
    )
    (dst / "meta/tasks.jsonl").write_text(lines({"task_index": i, "task": t} for i, t in sorted(task_of.items())))
    v21 = {**info, "codebase_version": "v2.1", "data_path": V21_DATA, "video_path": V21_VIDEO}
    v21["total_chunks"] = max(e["episode_index"] for e in episodes) // chunks + 1
    (dst / "meta/info.json").write_text(json.dumps(v21, indent=2))
    shutil.copy(src / "meta/stats.json", dst / "meta/stats.json")
    shutil.copy(modality_json, dst / "meta/modality.json")
    return dst


# --- run-time stand-ins -----------------------------------------------------------------------------------


# None: the decoder threads their call asks for (0, FFmpeg's choice); diagnose.py's single-thread phase sets 1 before
# the loader's workers fork
DECODER_THREADS: int | None = None


class PyAVVideoDecoder:
    """What `video_utils.get_frames_by_indices` uses of torchcodec's `VideoDecoder`, decoded with PyAV: every
    frame up to the last index asked for, in decode order, RGB, NHWC."""

    def __init__(self, path, device="cpu", dimension_order="NHWC", num_ffmpeg_threads=0):
        assert device == "cpu" and dimension_order == "NHWC"
        self.path = str(path)
        self.threads = num_ffmpeg_threads if DECODER_THREADS is None else DECODER_THREADS

    def get_frames_at(self, indices):
        indices = np.asarray(indices)
        frames = []
        with av.open(self.path) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            stream.codec_context.thread_count = self.threads  # 0: FFmpeg's choice, as torchcodec asks
            for frame in container.decode(stream):
                frames.append(frame.to_ndarray(format="rgb24"))
                if len(frames) > indices.max():
                    break
        return types.SimpleNamespace(data=torch.from_numpy(np.stack(frames)[indices]))


def install_torchcodec_standin() -> None:
    module = types.ModuleType("torchcodec")
    module.decoders = types.SimpleNamespace(VideoDecoder=PyAVVideoDecoder)
    sys.modules["torchcodec"] = module


def setup_reference() -> None:
    """Their package importable from .isaac, with the run-time stand-ins step.py's docstring lists and the
    torchcodec one above (forked DataLoader workers inherit them)."""
    if "gr00t.model" in sys.modules:
        return
    sys.path[:0] = [p for p in (str(SRC),) if p not in sys.path]
    package = types.ModuleType("gr00t.model")  # their gr00t/model/__init__.py imports what the step never uses
    package.__path__ = [str(SRC / "gr00t" / "model")]
    import gr00t  # noqa: F401

    sys.modules["gr00t.model"] = package
    from transformers import PreTrainedModel

    PreTrainedModel._check_and_enable_flash_attn_2 = classmethod(lambda cls, config, *a, **k: config)
    builtins.Siglip2Model = type("Siglip2Model", (), {})
    builtins.Siglip2ForImageClassification = type("Siglip2ForImageClassification", (), {})
    install_torchcodec_standin()


# --- their data path --------------------------------------------------------------------------------------


def model_config(horizon: int):
    """The model config step.py builds the model from, with the LIBERO scripts' colour jitter."""
    from gr00t.configs.model.gr00t_n1d6 import Gr00tN1d6Config

    return Gr00tN1d6Config(
        max_state_dim=128, max_action_dim=128, action_horizon=horizon, color_jitter_params=dict(LIBERO_JITTER)
    )


def isaac_processor(config):
    """`setup.py:147-167`: their processor from the model config (no checkpoint), LIBERO's modality config."""
    from gr00t.configs.data.embodiment_configs import MODALITY_CONFIGS
    from gr00t.model.gr00t_n1d6.processing_gr00t_n1d6 import Gr00tN1d6Processor

    return Gr00tN1d6Processor(
        modality_configs=MODALITY_CONFIGS,
        statistics=None,
        embodiment_id_mapping=None,
        image_crop_size=config.image_crop_size,
        image_target_size=config.image_target_size,
        random_rotation_angle=config.random_rotation_angle,
        color_jitter_params=config.color_jitter_params,
        model_name=config.model_name,
        model_type=config.backbone_model_type,
        formalize_language=config.formalize_language,
        max_state_dim=config.max_state_dim,
        max_action_dim=config.max_action_dim,
        apply_sincos_state_encoding=config.apply_sincos_state_encoding,
        max_action_horizon=config.action_horizon,
        use_albumentations=config.use_albumentations_transforms,
        shortest_image_edge=config.shortest_image_edge,
        crop_fraction=config.crop_fraction,
        use_relative_action=config.use_relative_action,
    )


def isaac_dataset(dataset_v21: Path, processor):
    """`factory.py:41-76` for one dataset path, without the process group's barrier."""
    from gr00t.configs.data.data_config import DataConfig
    from gr00t.data.dataset.sharded_mixture_dataset import ShardedMixtureDataset
    from gr00t.data.dataset.sharded_single_step_dataset import ShardedSingleStepDataset
    from gr00t.data.embodiment_tags import EmbodimentTag
    from gr00t.data.stats import generate_rel_stats, generate_stats

    data = DataConfig()
    generate_stats(dataset_v21)
    generate_rel_stats(dataset_v21, EmbodimentTag(EMBODIMENT))
    single = ShardedSingleStepDataset(
        dataset_path=dataset_v21,
        embodiment_tag=EmbodimentTag(EMBODIMENT),
        modality_configs=data.modality_configs[EMBODIMENT],
        video_backend=data.video_backend,
        shard_size=data.shard_size,
        episode_sampling_rate=data.episode_sampling_rate,
        seed=data.seed,
        allow_padding=data.allow_padding,
    )
    return ShardedMixtureDataset(
        datasets=[single],
        weights=[1.0],
        processor=processor,
        seed=data.seed,
        training=True,
        num_shards_per_epoch=data.num_shards_per_epoch,
        override_pretraining_statistics=data.override_pretraining_statistics,
    )


def isaac_loader(dataset, processor, batch: int, workers: int = WORKERS, worker_init=None):
    """`trainer.py:227-242` with the LIBERO scripts' workers and transformers' default pin_memory. `worker_init`:
    run in each worker as it starts (diagnose.py's single-thread phase; theirs sets none)."""
    from gr00t.configs.data.data_config import DataConfig

    return torch.utils.data.DataLoader(
        dataset,
        batch_size=batch,
        collate_fn=processor.collator,
        num_workers=workers,
        pin_memory=True,
        persistent_workers=workers > 0,
        worker_init_fn=worker_init,
        **({"multiprocessing_context": DataConfig().multiprocessing_context} if workers > 0 else {}),
    )


def to_device(inputs: dict, device: str = "cuda") -> dict:
    """On the device, as transformers' Trainer moves a batch (their collator gives pixel_values as a list)."""
    return {k: [t.to(device) for t in v] if isinstance(v, list) else v.to(device) for k, v in inputs.items()}


def describe(inputs: dict) -> dict:
    """Each batch entry's shape and dtype (a list's per element)."""
    out = {}
    for k, v in inputs.items():
        items = v if isinstance(v, list) else [v]
        out[k] = [f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" for t in items[:2]] + (
            [f"... {len(items)} in all"] if len(items) > 2 else []
        )
    return out


# --- CPU check --------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True, help="a vlabench (LeRobot v3.0) dataset")
    parser.add_argument("--v21", type=Path, help="where its v2.1 copy goes (default: beside it, -isaac-v21)")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument("--samples", type=int, default=32, help="samples timed one by one in this process")
    args = parser.parse_args()
    setup_reference()
    t0 = time.perf_counter()
    v21 = to_v21(args.dataset, args.v21 or args.dataset.with_name(args.dataset.name + "-isaac-v21"), MODALITY)
    print(f"v2.1 copy at {v21} in {time.perf_counter() - t0:.1f} s")
    processor = isaac_processor(model_config(50))
    dataset = isaac_dataset(v21, processor)
    single = dataset.datasets[0]
    print("shard lengths:", [int(n) for n in single.shard_lengths])

    # per-sample worker cost, one process: an episode's decode, then the processor per step, then collation
    ep, steps = single.sharded_episodes[0][0]
    t0 = time.perf_counter()
    episode = single.episode_loader[ep]
    decode_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    samples = [single.get_datapoint(episode, s) for s in steps[: args.samples]]
    per_sample = (time.perf_counter() - t0) / len(samples)
    t0 = time.perf_counter()
    processor.collator(samples[: args.batch])
    collate_s = time.perf_counter() - t0
    splits = int(1 / single.episode_sampling_rate)  # each episode is decoded once per split it is cut into
    print(
        f"episode {ep}: {len(episode)} frames x 2 views decoded in {1e3 * decode_s:.0f} ms "
        f"({1e3 * decode_s / len(episode):.1f} ms per step; decoded {splits}x per epoch, once per split); "
        f"processor {1e3 * per_sample:.1f} ms per sample; collator {1e3 * collate_s:.0f} ms per batch of "
        f"{args.batch} ({1e3 * collate_s / args.batch:.1f} ms per sample)"
    )

    loader = isaac_loader(dataset, processor, args.batch, args.workers)
    it, times = iter(loader), []
    for _ in range(args.batches):
        t0 = time.perf_counter()
        batch = next(it)["inputs"]
        times.append(time.perf_counter() - t0)
    print(f"DataLoader ({args.workers} workers): per-batch seconds {[round(t, 2) for t in times]}")
    print("batch:", json.dumps(describe(batch), indent=1))
    return 0


MODALITY = SRC / "examples" / "LIBERO" / "modality.json"

if __name__ == "__main__":
    sys.exit(main())
