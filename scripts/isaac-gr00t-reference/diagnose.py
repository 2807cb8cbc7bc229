"""Where Isaac-GR00T N1.6's step loses time with its own data path (336 ms against their synthetic step's 231 ms,
in different calls: docs/history/measurements/h200/reference/). One process, one model build, the phases in this order:

  P0  synthetic         their step on step.py's synthetic batch (224 px, 220 VL tokens), no loader; profiled
  P2b busy, no fetch    8 real batches from their loader (252 px, ~203 tokens) cycled on the GPU while the loader's
                        workers go on caching their next shard (their background thread), no fetch in the step
  P2  data path         step.py's isaac_data_step: each step's batch fetched inside its timing; profiled
  P1  idle, real        the same 8 real batches after the workers are shut down: the batch content alone
  P0b synthetic again   P0 again: the host's drift over the run
  P3  (--single-thread) a new loader whose workers decode with 1 FFmpeg thread and 1 OpenCV thread, fed as P2

Every phase records CUDA-event step times, a host-dispatch probe after every step (harness/machine/probe.py's 1000
CPU adds), the host's busy CPU share (/proc/stat) and each loader worker's cores (/proc/PID/stat) over its timed
steps. Read off it: P1 - P0 the content (252 px, token count); P2b - P1 the workers' CPU load; P2 - P2b the fetch,
the pin-memory thread and the copies; P0b - P0 drift; P3 against P2 thread oversubscription.
On the device, with .isaac carried: DIAGNOSE=1 bash scripts/isaac-gr00t-reference/run.sh (docs/gr00t.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import data_path  # noqa: E402
import step as reference  # noqa: E402

from harness.machine.probe import time_host_ops  # noqa: E402
from harness.machine.utilisation import cpu_times  # noqa: E402

HOST = torch.zeros(1)


def process_cores(pids: list[int]) -> dict[int, int]:
    """utime + stime ticks of each process."""
    ticks = {}
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks[pid] = int(fields[11]) + int(fields[12])
    return ticks


def phase(name: str, step, next_batch, warmup: int, timed: int, result: dict, workers: list[int] = ()) -> dict:
    """`warmup` then `timed` steps, each fed by `next_batch()` inside its timing, the host probed after each."""
    reference.timed_fetch_steps(step, next_batch, warmup, 0)
    probes = []
    busy0, ticks0, began = cpu_times(), process_cores(workers), time.perf_counter()
    times, waits = reference.timed_fetch_steps(
        step, next_batch, 0, timed, after_step=lambda: probes.append(time_host_ops(HOST))
    )
    wall, busy1, ticks1 = time.perf_counter() - began, cpu_times(), process_cores(workers)
    tick = os.sysconf("SC_CLK_TCK")
    out = {
        "median_ms": 1e3 * statistics.median(times),
        "min_ms": 1e3 * min(times),
        "max_ms": 1e3 * max(times),
        "wait_ms": 1e3 * statistics.median(waits),
        "host_probe_ms": 1e3 * statistics.median(probes),
        "host_busy_share": (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]) if busy0 and busy1 else None,
        "worker_cores": [(ticks1[p] - ticks0[p]) / tick / wall for p in workers],
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
        "step_times_s": times,
    }
    busy = "-" if out["host_busy_share"] is None else f"{100 * out['host_busy_share']:.0f}%"
    print(
        f"{name}: {out['median_ms']:.1f} ms (min {out['min_ms']:.1f}), wait {out['wait_ms']:.1f} ms, host probe "
        f"{out['host_probe_ms']:.2f} ms, host busy {busy}, workers {[round(c, 2) for c in out['worker_cores']]} "
        "cores",
        flush=True,
    )
    result[name] = out
    return out


def one_opencv_thread(_worker: int) -> None:
    import cv2

    cv2.setNumThreads(1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", type=Path, required=True, help="a vlabench LeRobot dataset (make-dataset)")
    parser.add_argument("--out", type=Path, required=True, help="where the result goes (JSON)")
    parser.add_argument("--single-thread", action="store_true", help="also P3 (one more shard build: ~a minute)")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    result = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "vlabench_commit": os.environ.get("VLABENCH_GIT_SHA"),
        "vlabench_dirty": os.environ.get("VLABENCH_GIT_DIRTY"),
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
        "lscpu": lscpu[-3000:],
    }
    save = lambda: args.out.write_text(json.dumps(result, indent=1))  # noqa: E731
    v21 = data_path.to_v21(args.dataset, Path("/tmp") / (args.dataset.name + "-isaac-v21"), data_path.MODALITY)
    model, _ = reference.isaac_model()
    processor = data_path.isaac_processor(data_path.model_config(reference.HORIZON))
    data = data_path.isaac_dataset(v21, processor)
    synthetic = data_path.to_device(reference.synthetic_batch(model))
    model = model.cuda().train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-5)
    step = reference.train_step(model, params, optimizer, lambda m, b: m(b)["loss"])

    phase("P0_synthetic", step, lambda: synthetic, 5, 20, result)
    result["P0_profile"] = reference.profile_steps(step, synthetic)
    save()

    it = iter(data_path.isaac_loader(data, processor, reference.BATCH))
    began = time.perf_counter()
    real = [data_path.to_device(next(it)["inputs"])]
    result["first_batch_s"] = time.perf_counter() - began
    real += [data_path.to_device(next(it)["inputs"]) for _ in range(7)]
    result["real_vl_tokens"] = [int(b["input_ids"].shape[1]) for b in real]
    workers = [w.pid for w in it._workers]
    cycled = itertools.cycle(real)
    phase("P2b_busy_no_fetch", step, lambda: next(cycled), 3, 20, result, workers)
    fetch = lambda: data_path.to_device(next(it)["inputs"])  # noqa: E731
    phase("P2_data_path", step, fetch, reference.DATA_WARMUP, 50, result, workers)
    result["P2_profile"] = reference.profile_steps(step, fetch)
    save()
    it._shutdown_workers()
    del it
    time.sleep(5)
    cycled = itertools.cycle(real)
    phase("P1_idle_real", step, lambda: next(cycled), 3, 20, result)
    phase("P0b_synthetic_again", step, lambda: synthetic, 3, 20, result)
    save()

    if args.single_thread:
        data_path.DECODER_THREADS = 1  # before the workers fork
        it = iter(data_path.isaac_loader(data, processor, reference.BATCH, worker_init=one_opencv_thread))
        next(it)
        workers = [w.pid for w in it._workers]
        fetch = lambda: data_path.to_device(next(it)["inputs"])  # noqa: E731
        phase("P3_single_thread_workers", step, fetch, 5, 30, result, workers)
        it._shutdown_workers()
        save()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
