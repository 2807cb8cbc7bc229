"""Isaac-GR00T's own N1.6 fine-tuning step beside vlabench's rungs, timed the same way on the same GPU.

Run by run.sh on the device machine with .isaac/ carried (prepare.sh). vlabench's community rung, and its
cuda-graphs and compile rungs (cumulative, as in scenarios/gr00t-loongforge.yaml), so that their gains can be read
against the reference's own step in one process as well as against our community rung. Every side runs one training step per
batch of 16 samples (2 views 224x224, a 220-token VL sequence, 50-step action chunks padded to 128-d), the batch
already on the GPU: forward and backward under bf16 autocast with TF32, gradient clipping at 1.0, torch AdamW
(foreach) over the fine-tuned parameters (frozen vision and lower LLM layers; the top 4 LLM layers, projector,
vlln and action head trainable). Warm-up steps excluded; every step between CUDA events; then 3 steps of each
side under torch.profiler (kernel time, device idle, launches, top kernels and host operators per step) and one
under cProfile. For the reference and our community rung also: per step component (vision, mlp1, LLM, vlln, DiT,
encoders) the host time of its forward and the aten operations it dispatches, and every host sync by the line that
caused it.

Isaac-GR00T's side is their unmodified code (`Gr00tN1d6`, their collator and their random init), with what it
takes to run it without flash-attn, applied at run time here and nowhere in vlabench:
- transformers' flash-attn availability check is skipped (their Eagle config asks for flash_attention_2);
- the Qwen3 LLM runs SDPA (the same math as their flash-attn path over unpadded tokens);
- SigLIP2's packed-sequence attention (flash-attn varlen over all images at once) is replaced by one batched
  SDPA over the images, each attending to itself only, as varlen does;
- their random init names two SigLIP2 classes its file never defines: empty stand-ins are registered.
So the comparison leaves out any flash-attn-2 versus SDPA difference.

With `--dataset PATH` (a vlabench LeRobot v3.0 dataset) the same call also times each side with its own data
path over that dataset: their step fed by their own DataLoader (data_path.py: their dataset classes over a v2.1
copy, video decode with a PyAV stand-in for torchcodec, training transforms, Eagle processing, collator, 4
workers, pinned memory), and vlabench's community rung of scenarios/gr00t-loongforge.yaml run as `vlabench run
... --rungs community --dataset PATH` runs it (its own process, harness/ladder/runner.py), both over the same
warm-up and timed steps, each step's batch fetched inside its timing; samples/s of each and their ratio.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from data_path import (  # beside this file
    MODALITY,
    describe,
    isaac_dataset,
    isaac_loader,
    isaac_processor,
    model_config,
    setup_reference,
    to_device,
    to_v21,
)
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[2]
BATCH, VL_TOKENS, HORIZON, WARMUP, TIMED = 16, 220, 50, 5, 20
BASE_INSTRUCTION = "pick up the black bowl between the plate and the ramekin and place it on the plate"
# the step components profiled on both sides (our module names; the reference's are mapped onto them)
COMPONENTS = ("vision", "mlp1", "llm", "vlln", "dit", "state_encoder", "action_encoder", "action_decoder")


def time_steps(step, batch) -> list[float]:
    times = []
    for i in range(WARMUP + TIMED):
        torch.manual_seed(i)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step(batch)
        end.record()
        torch.cuda.synchronize()
        if i >= WARMUP:
            times.append(start.elapsed_time(end) / 1000)
    return times


def profile_steps(step, batch, steps: int = 3) -> dict:
    """Where a side's step goes, after its timed steps: kernel time, device idle (launch gaps, host work), kernel
    launches and top kernels per step (harness/ladder/profile.py's summary), and the host operators with the most CPU
    time of their own. `batch`: the batch every step takes, or a function fetching each step's (fetch profiled)."""
    from harness.ladder.profile import kernel_summary

    fetch = batch if callable(batch) else lambda: batch
    walls, hosts = [], []
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for i in range(steps):
            torch.manual_seed(WARMUP + TIMED + i)
            start = time.perf_counter()
            step(fetch())
            hosts.append(time.perf_counter() - start)  # until the host has issued everything
            torch.cuda.synchronize()
            walls.append(time.perf_counter() - start)
    summary = kernel_summary(prof, steps, statistics.median(walls), top=10)
    summary["host_s"] = statistics.median(hosts)
    averages = prof.key_averages()
    host = sorted(((e.key, e.self_cpu_time_total, e.count) for e in averages), key=lambda kv: -kv[1])[:15]
    summary["top_host_ops"] = [
        {"name": k[:120], "self_cpu_ms_per_step": t / 1e3 / steps, "calls_per_step": n / steps} for k, t, n in host
    ]
    # host waits on the device: each one drains the queue the host had built up ahead of the GPU
    syncs = [e for e in averages if "Synchronize" in e.key or e.key in ("aten::nonzero", "aten::item")]
    summary["syncs"] = [
        {"name": e.key, "calls_per_step": e.count / steps, "cpu_ms_per_step": e.cpu_time_total / 1e3 / steps}
        for e in syncs
    ]
    summary["python_top"] = python_profile(step, fetch())
    return summary


def python_profile(step, batch, top: int = 25) -> dict:
    """One step under cProfile: the Python functions with the most host time of their own, and those with the most
    cumulative time (cProfile's overhead inflates both; the ranking is what matters)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    step(batch)
    torch.cuda.synchronize()
    profiler.disable()
    stats = pstats.Stats(profiler).stats

    def rows(key: int) -> list[dict]:  # stats values: (cc, nc, tottime, cumtime, callers)
        ranked = sorted(stats.items(), key=lambda kv: -kv[1][key])[:top]
        return [
            {
                "function": f"{Path(f).name}:{line}:{name}"[:120],
                "calls": v[1],
                "own_ms": 1e3 * v[2],
                "cumulative_ms": 1e3 * v[3],
            }
            for (f, line, name), v in ranked
        ]

    return {"by_own_time": rows(2), "by_cumulative_time": rows(3)}


class OpCensus(TorchDispatchMode):
    """Counts the aten operations one step dispatches, by the step component running them (`label`)."""

    def __init__(self):
        super().__init__()
        self.label = ["outside the components (loss, backward, clipping, optimizer)"]
        self.counts: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[self.label[-1], func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def component_hooks(components: dict, enter, leave) -> list:
    """enter(label) before and leave(label) after each component's forward (the hooks return None, so the
    component's inputs and output are left as they are)."""
    handles = []
    for label, module in components.items():

        def pre(module, args, label=label):
            enter(label)

        def post(module, args, output, label=label):
            leave(label)

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    return handles


def component_profile(step, batch, components: dict) -> dict:
    """Per step component (the same parts on both sides): the host time its forward takes (one step, hooks
    only), and the aten operations it dispatches (one step under a dispatch mode; backward, clipping and the
    optimizer are counted together outside the components)."""
    host_ms: collections.Counter = collections.Counter()
    started: dict = {}

    def enter(label):
        started[label] = time.perf_counter()

    def leave(label):
        host_ms[label] += 1e3 * (time.perf_counter() - started.pop(label))

    handles = component_hooks(components, enter, leave)
    start = time.perf_counter()
    step(batch)
    host_ms["whole step (host)"] = 1e3 * (time.perf_counter() - start)
    torch.cuda.synchronize()
    for h in handles:
        h.remove()

    census = OpCensus()
    handles = component_hooks(components, census.label.append, lambda label: census.label.pop())
    with census:
        step(batch)
    torch.cuda.synchronize()
    for h in handles:
        h.remove()
    ops: dict = collections.defaultdict(dict)
    for (label, op), n in sorted(census.counts.items()):
        ops[label][op] = n
    return {
        "forward_host_ms": dict(host_ms),
        "ops": {label: {"total": sum(c.values()), "by_op": c} for label, c in ops.items()},
    }


def sync_sites(step, batch) -> dict:
    """One step with torch's CUDA sync debug mode on: every operation that makes the host wait for the device,
    counted by the innermost Python line outside torch that caused it (`<autograd thread>` when backward did)."""
    import traceback
    import warnings

    sites: collections.Counter = collections.Counter()
    stacks: dict[str, list[str]] = {}  # each site's first full stack, torch frames included: what synced there

    def record(message, category, filename, lineno, file=None, line=None):
        if "called a synchronizing" not in str(message):  # not the mode's own "prototype feature" notice
            return
        stack = [f for f in traceback.extract_stack()[:-1] if "warnings" not in f.filename]
        frames = [f for f in stack if "/torch/" not in f.filename]
        frame = frames[-1] if frames else None
        where = f"{Path(frame.filename).name}:{frame.lineno}:{frame.name}" if frame else "<autograd thread>"
        sites[where] += 1
        stacks.setdefault(where, [f"{f.filename}:{f.lineno}:{f.name}" for f in stack[-8:]] + [str(message)[:200]])

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step(batch)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()  # after the mode is off: this wait is the script's, not the step's
    return {"total": sum(sites.values()), "by_site": dict(sites.most_common()), "stacks": stacks}


def step_record(model, times: list[float], vl_tokens: int, **extra) -> dict:
    return {
        "vl_tokens": vl_tokens,
        "params": sum(p.numel() for p in model.parameters()),
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        **extra,
        "step_times_s": times,
    }


def train_step(model, params, optimizer, loss_of):
    def step(batch):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_of(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def packed_image_sdpa(
    module, query, key, value, attention_mask=None, dropout=0.0, scaling=None, seq_len_list=None, **kw
):
    """SigLIP2's packed attention, [1, H, sum(L), D] in, [sum(L), H, D] out: every image attends to itself only
    (all images have the same length at 224x224, so one batched SDPA call does it)."""
    n, length = len(seq_len_list), seq_len_list[0]
    assert all(s == length for s in seq_len_list)
    heads, dim = query.shape[1], query.shape[3]
    q, k, v = (t[0].view(heads, n, length, dim).transpose(0, 1) for t in (query, key, value))
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scaling)  # [n, H, L, D]
    return out.transpose(1, 2).reshape(n * length, heads, dim), None


def isaac_model():
    """Their model, built from data_path.model_config (the config below with the LIBERO scripts' colour jitter,
    which only their processor reads), with the SDPA stand-ins; returns it and its build seconds."""
    setup_reference()
    from gr00t.model.gr00t_n1d6.gr00t_n1d6 import Gr00tN1d6

    t0 = time.perf_counter()
    model = Gr00tN1d6(model_config(HORIZON))
    built_s = time.perf_counter() - t0
    sys.modules[
        type(model.backbone.model.vision_model).__module__
    ].flash_attention_forward_for_packing = packed_image_sdpa
    model.backbone.model.language_model.config._attn_implementation = "sdpa"
    return model, built_s


def synthetic_batch(model) -> dict:
    """A batch of BATCH random samples through their collator (on the CPU): two 224x224 views each and an
    instruction whose VL sequence is VL_TOKENS long, as the community rung's synthetic batch."""
    from PIL import Image

    processor = model.collator.processor
    rng = np.random.default_rng(0)

    def sample(instruction):
        images = [Image.fromarray(rng.integers(0, 255, (224, 224, 3), dtype=np.uint8)) for _ in range(2)]
        conv = [
            {
                "role": "user",
                "content": [{"type": "text", "text": instruction}, *[{"type": "image", "image": i} for i in images]],
            }
        ]
        text = processor.apply_chat_template(conv, tokenize=False, add_generation_prompt=False)
        return {
            "vlm_content": {"text": text, "images": images, "conversation": conv},
            "state": rng.standard_normal((1, 128)).astype(np.float32),
            "action": rng.standard_normal((HORIZON, 128)).astype(np.float32),
            "action_mask": np.pad(np.ones((HORIZON, 7), np.float32), ((0, 0), (0, 121))),
            "embodiment_id": np.int64(2),
        }

    # an instruction whose VL sequence is VL_TOKENS long, as the community rung's
    words = (" and then ".join([BASE_INSTRUCTION] * 4)).split()
    for n in range(len(words), 0, -1):
        instruction = " ".join(words[:n])
        if model.collator([sample(instruction)])["inputs"]["input_ids"].shape[1] <= VL_TOKENS:
            break
    return model.collator([sample(instruction) for _ in range(BATCH)])["inputs"]


def isaac_step(detail: bool = True) -> dict:
    model, built_s = isaac_model()
    batch = synthetic_batch(model)
    model = model.cuda().train()
    batch = to_device(batch)  # on the GPU before the step, as transformers' Trainer moves a batch
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-5)
    step = train_step(model, params, optimizer, lambda m, b: m(b)["loss"])
    times = time_steps(step, batch)
    if not detail:
        return step_record(model, times, int(batch["input_ids"].shape[1]), built_s=built_s)
    profile = profile_steps(step, batch)
    eagle, head = model.backbone.model, model.action_head
    components = {
        "vision": eagle.vision_model,
        "mlp1": eagle.mlp1,
        "llm": eagle.language_model,
        "vlln": head.vlln,
        "dit": head.model,
        "state_encoder": head.state_encoder,
        "action_encoder": head.action_encoder,
        "action_decoder": head.action_decoder,
    }
    return step_record(
        model,
        times,
        int(batch["input_ids"].shape[1]),
        built_s=built_s,
        profile=profile,
        components=component_profile(step, batch, components),
        sync_sites=sync_sites(step, batch),
    )


# vlabench's rungs timed beside the reference (scenarios/gr00t-loongforge.yaml, cumulative), each with the VL
# sequence left-padded to 220 tokens (masked) so that every side runs the same sequence length (the synthetic
# prompts are shorter; their collator gives 220 for the instruction); the community rung makes the reference's
# host syncs and its vision packing, as the scenario's does, and a graph can do neither
COMMUNITY = {
    "attention": "sdpa",
    "lm_head": True,
    "compile": "none",
    "vl_pad": VL_TOKENS,
    "host_syncs": "reference",
    "vision_packing": "reference",
}
GRAPHS = {**COMMUNITY, "cuda_graphs": True, "host_syncs": "none", "vision_packing": "none"}
RUNGS = {
    "vlabench_community": COMMUNITY,
    "vlabench_cuda_graphs": GRAPHS,
    "vlabench_compile": {**GRAPHS, "lm_head": False, "compile": "per-block"},
}


def vlabench_step(rung_options: dict, detail: bool) -> dict:
    sys.path.insert(0, str(ROOT))
    from models.gr00t import FAMILY
    from models.workload import Workload

    workload = Workload(
        batch_size=BATCH,
        cameras=2,
        text_tokens=VL_TOKENS - 128,
        action_horizon=HORIZON,
        dtype="bf16",
        lr=1e-4,
        model_size="full",
    )
    options = FAMILY.parse_options(rung_options)
    model = FAMILY.build("full", options, workload, "cuda", torch.bfloat16, 0).model
    optimizer = FAMILY.optimizer(model, options, workload, "cuda")
    step = FAMILY.make_step(model, optimizer, options)  # autocast, backward, clip 1.0, AdamW, zero_grad
    batch = FAMILY.make_batches("full", workload, 1, "cuda", torch.bfloat16, 0)[0]
    prompt = int(batch["input_ids"].shape[1])
    times = time_steps(step, batch)
    extra = {"options": rung_options, "prompt_tokens": prompt, "profile": profile_steps(step, batch)}
    if detail:
        components = {name: getattr(model, name) for name in COMPONENTS}
        extra["components"] = component_profile(step, batch, components)
        extra["sync_sites"] = sync_sites(step, batch)
    return step_record(model, times, max(prompt, VL_TOKENS), **extra)


DATA_WARMUP = 10  # the first includes each worker's first shard (their loader) or the workers' start (ours)


class GcWatch:
    """Python's garbage collections while active (gc.callbacks): how many per generation and their seconds, and
    how many objects the collector tracked at the start. A host-bound step pays for every collection, and a
    process holding more objects (the reference's imports, model and loader) can collect longer."""

    def __enter__(self):
        self.seconds, self.collections = 0.0, [0, 0, 0]
        self.tracked = len(gc.get_objects())
        gc.callbacks.append(self._callback)
        return self

    def _callback(self, phase, info):
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.collections[info["generation"]] += 1

    def __exit__(self, *exc):
        gc.callbacks.remove(self._callback)

    def record(self) -> dict:
        return {"tracked_objects": self.tracked, "collections": self.collections, "seconds": self.seconds}


def timed_fetch_steps(step, next_batch, warmup: int, timed: int, after_step=None) -> tuple[list[float], list[float]]:
    """Steps each fed by `next_batch()` inside its timing (CUDA events around fetch, copy and step, as a
    vlabench rung times a dataset feed); returns the timed steps' seconds and their waits for the batch.
    `after_step()` runs after each timed step, outside its timing (diagnose.py's host probe)."""
    times, waits = [], []
    for i in range(warmup + timed):
        torch.manual_seed(i)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        batch = next_batch()
        wait = time.perf_counter() - t0
        step(batch)
        end.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end) / 1000)
            waits.append(wait)
            if after_step is not None:
                after_step()
    return times, waits


def rates(times: list[float]) -> dict:
    """samples/s at the median step (as vlabench's rung reports it) and over the whole timed window."""
    return {"samples_per_s": BATCH / statistics.median(times), "samples_per_s_window": BATCH * len(times) / sum(times)}


def isaac_data_step(dataset: Path, timed: int) -> dict:
    """Their step fed by their own DataLoader over `dataset` (data_path.py), batches moved to the GPU as
    transformers' Trainer moves them."""
    t0 = time.perf_counter()
    v21 = to_v21(dataset, Path("/tmp") / (dataset.name + "-isaac-v21"), MODALITY)
    converted_s = time.perf_counter() - t0
    model, built_s = isaac_model()
    processor = isaac_processor(model_config(HORIZON))
    data = isaac_dataset(v21, processor)
    it = iter(isaac_loader(data, processor, BATCH))
    first = next(it)["inputs"]  # its shapes, before the model moves: what their loader gives
    model = model.cuda().train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-5)
    step = train_step(model, params, optimizer, lambda m, b: m(b)["loss"])
    with GcWatch() as watch:  # warm-up and timed steps
        times, waits = timed_fetch_steps(step, lambda: to_device(next(it)["inputs"]), DATA_WARMUP, timed)
    single = data.datasets[0]
    return step_record(
        model,
        times,
        int(first["input_ids"].shape[1]),
        built_s=built_s,
        v21_copy_s=converted_s,
        batch_shapes=describe(first),
        shard_lengths=[int(n) for n in single.shard_lengths],
        data_wait_s=waits,
        data_wait_ms=1e3 * statistics.median(waits),
        gc=watch.record(),
        **rates(times),
    )


def vlabench_data_rung(
    dataset: Path, timed: int, target_name: str, size: str = "full", in_process: bool = False
) -> dict:
    """vlabench's community rung over `dataset` as `vlabench run scenarios/gr00t-loongforge.yaml --rungs community
    --dataset PATH --target TARGET` runs it (its own process), over the same warm-up and timed steps, at the model
    size `size` (full-252: the reference's 252-pixel views). `in_process`: the same rung measured inside this
    process instead (harness/ladder/rung.py's run), where the reference's imports and loader ran: whether the
    process, not the step, slows a host-bound step."""
    import dataclasses

    sys.path.insert(0, str(ROOT))
    from harness.arguments import resolve_target
    from harness.ladder import rung as rung_module
    from harness.ladder.runner import run_rung_process
    from harness.scenario import load_scenario, with_dataset
    from harness.spec import scenario_spec

    scenario = with_dataset(load_scenario(ROOT / "scenarios" / "gr00t-loongforge.yaml"), str(dataset))
    target, error = resolve_target(scenario, target_name)
    if error:
        raise ValueError(error)
    rung = next(r for r in scenario.ladder if r.name == "community")
    spec = scenario_spec(scenario, target, rung, model_size=size)
    workload = dataclasses.replace(spec.workload, warmup_steps=DATA_WARMUP, timed_steps=timed)
    spec = dataclasses.replace(spec, workload=workload)
    with GcWatch() as watch:  # in this process only: the rung's build, warm-up and timed steps
        record = rung_module.run(spec) if in_process else run_rung_process(spec, print, timeout_s=None)
    if record.get("status") != "ok":
        raise RuntimeError(f"community rung: {record.get('status')}: {record.get('reason')}")
    keep = ("samples_per_s", "data_wait_ms", "loader", "peak_memory_gib", "losses")
    return {
        "model_size": size,
        "process": "step.py's" if in_process else "its own",
        "options": rung.cumulative,
        "loader_options": rung.loader_cumulative,
        "batch_size": workload.batch_size,
        **{k: record[k] for k in keep if k in record},
        "step_times_s": record["step_times_s"],
        "samples_per_s_window": workload.batch_size * len(record["step_times_s"]) / sum(record["step_times_s"]),
        **({"gc": watch.record(), "torch_threads": torch.get_num_threads()} if in_process else {}),
    }


def measure_side(result: dict, name: str, run, report, out: Path) -> None:
    """One side measured into result[name] and `report`ed; if it fails, its error and traceback instead, so the
    other sides' measurements stand. The result file is rewritten after each side."""
    gc.collect()
    try:
        result[name] = run()
        report(name, result[name])
    except Exception as e:  # keep the other sides' measurements
        import traceback

        result[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        print(result[name]["traceback"])
    torch.cuda.empty_cache()  # the side's model and optimizer went with its function
    out.write_text(json.dumps(result, indent=1))


def report_data_side(name: str, side: dict) -> None:
    t = side["step_times_s"]
    print(
        f"{name}: {side['samples_per_s']:.1f} samples/s at the median step "
        f"({1e3 * statistics.median(t):.1f} ms, min {1e3 * min(t):.1f}, max {1e3 * max(t):.1f}), "
        f"{side['samples_per_s_window']:.1f} over the window, data wait {side.get('data_wait_ms', float('nan')):.1f} ms"
    )
    if "gc" in side:
        print(f"  garbage collection: {side['gc']}")


def data_paths(
    result: dict,
    dataset: Path,
    timed: int,
    target: str,
    out: Path,
    repeats: int = 1,
    size: str = "full",
    in_process: bool = False,
) -> None:
    """Both sides with their own data path over `dataset`, alternated `repeats` times (theirs, ours, theirs, ...:
    the host drifts over a call, so each pair is measured back to back), and ours over theirs in samples/s: per
    pair, and the median of the pairs with their range. `in_process`: each pair also times ours inside this
    process, right after ours in its own (`..._in_process` keys, and its own ratio over theirs)."""
    ours_kinds = [("vlabench_community_data", False)] + ([("vlabench_community_data_in_process", True)] * in_process)
    pairs: dict[str, list[dict]] = {key: [] for key, _ in ours_kinds}
    for r in range(repeats):
        suffix = "" if r == 0 else f"_{r + 1}"
        theirs_key = f"isaac_gr00t_data{suffix}"
        measure_side(result, theirs_key, lambda: isaac_data_step(dataset, timed), report_data_side, out)
        for key, inside in ours_kinds:
            run_ours = lambda inside=inside: vlabench_data_rung(dataset, timed, target, size, inside)  # noqa: E731
            measure_side(result, key + suffix, run_ours, report_data_side, out)
            theirs, ours = result[theirs_key], result[key + suffix]
            if "samples_per_s" in theirs and "samples_per_s" in ours:
                pairs[key].append(
                    {
                        "samples_per_s": ours["samples_per_s"] / theirs["samples_per_s"],
                        "samples_per_s_window": ours["samples_per_s_window"] / theirs["samples_per_s_window"],
                    }
                )
                print(f"pair {r + 1}: {key} / Isaac-GR00T, each with its data path, samples/s: {pairs[key][-1]}")
    for key, inside in ours_kinds:
        if pairs[key]:
            name = "data_path_in_process" if inside else "data_path"
            ratios = [p["samples_per_s"] for p in pairs[key]]
            result[f"{name}_pairs"] = pairs[key]
            result[f"{name}_ours_over_theirs"] = {
                "samples_per_s": statistics.median(ratios),
                "samples_per_s_window": statistics.median(p["samples_per_s_window"] for p in pairs[key]),
                "min": min(ratios),
                "max": max(ratios),
                "pairs": len(ratios),
            }
            print(f"{key} / Isaac-GR00T over the pairs:", result[f"{name}_ours_over_theirs"])
    out.write_text(json.dumps(result, indent=1))


def report_step_side(name: str, side: dict) -> None:
    times = side["step_times_s"]
    print(
        f"{name}: median {1000 * statistics.median(times):.1f} ms (min {1000 * min(times):.1f}, max "
        f"{1000 * max(times):.1f}), VL {side['vl_tokens']} tokens, "
        f"{side['trainable'] / 1e9:.3f}B of {side['params'] / 1e9:.3f}B trainable"
    )
    p = side["profile"]
    print(
        f"  profiled: kernels {1000 * p['kernel_s']:.1f} ms of {1000 * p['wall_s']:.1f} ms per step, "
        f"{p['kernel_launches']:.0f} launches, device idle {1000 * p['idle_s']:.1f} ms, host done after "
        f"{1000 * p['host_s']:.1f} ms"
    )
    if "components" in side:
        c = side["components"]
        print("  forward host ms:", {k: round(v, 1) for k, v in c["forward_host_ms"].items()})
        print("  aten ops:", {k: v["total"] for k, v in c["ops"].items()})
        print("  syncs:", json.dumps(side["sync_sites"]))
    for row in p["top_kernels"][:5] + p["top_host_ops"][:8] + p["syncs"] + p["python_top"]["by_own_time"][:12]:
        print("   ", json.dumps(row))


SIDE_NAMES = {
    "isaac_gr00t": "Isaac-GR00T N1.6 (their step)",
    "vlabench_community": "vlabench community",
    "vlabench_cuda_graphs": "vlabench cuda-graphs",
    "vlabench_compile": "vlabench compile",
    "isaac_gr00t_again": "Isaac-GR00T N1.6 again, after vlabench's rungs",
}


def reference_median(result: dict) -> float:
    """The reference's step: the median of all its timed steps in the run, before and after our rungs (the host
    drifts over a run, and the reference is measured at both ends so that the order favours no side)."""
    times = [t for key in ("isaac_gr00t", "isaac_gr00t_again") for t in result.get(key, {}).get("step_times_s", [])]
    return statistics.median(times)


def is_real_sync(site: str) -> bool:
    """Runs before the recorder's filter also counted the sync debug mode's own first-use notice, which the
    script's `sync_sites` line raised: that is not a sync of the step."""
    return not (site.startswith("step.py:") and site.endswith(":sync_sites"))


def ms(seconds: float) -> str:
    return f"{1e3 * seconds:.1f}"


def render_summary(results: dict[str, dict]) -> str:
    """One row per run of this script: every side's median step, our community rung over the reference's step,
    and the graphed rungs' speedups over the reference's step and (in brackets) over our community rung."""
    lines = [
        "| run (vlabench commit) | Isaac-GR00T N1.6: pooled (first, again) | vlabench community | cuda-graphs "
        "| compile | community / Isaac-GR00T | cuda-graphs speedup over Isaac-GR00T (over community) "
        "| compile speedup over Isaac-GR00T (over community) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        theirs = reference_median(r)
        first, again = (statistics.median(r[k]["step_times_s"]) for k in ("isaac_gr00t", "isaac_gr00t_again"))
        community, graphs, compiled = (statistics.median(r[k]["step_times_s"]) for k in RUNGS)
        lines.append(
            f"| {name} ({r['vlabench_commit']}) | {ms(theirs)} ms ({ms(first)}, {ms(again)}) | {ms(community)} ms "
            f"| {ms(graphs)} ms | {ms(compiled)} ms | {community / theirs:.2f} "
            f"| {theirs / graphs:.2f}x ({community / graphs:.2f}x) | {theirs / compiled:.2f}x ({community / compiled:.2f}x) |"
        )
    return "\n".join(lines)


def render_tables(result: dict) -> str:
    """The markdown tables docs/history/gr00t-runs.md shows for a result of this script: every side's step (median, spread,
    speedup over the reference's step, the profile's kernel time, launches, device idle and host time), then the
    reference beside our community rung per component (forward host time, aten operations) and their host
    syncs."""
    theirs = reference_median(result)
    lines = [
        "| step | median | min-max | speedup over Isaac-GR00T's step (all its timed steps pooled) | kernels | launches | device idle | host done |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, label in SIDE_NAMES.items():
        side = result.get(key)
        if not side or "step_times_s" not in side:
            continue
        t, p = side["step_times_s"], side.get("profile")
        profiled = (
            f"{ms(p['kernel_s'])} ms | {p['kernel_launches']:.0f} | {ms(p['idle_s'])} ms | {ms(p['host_s'])} ms"
            if p
            else "- | - | - | -"
        )
        speedup = "-" if key.startswith("isaac") else f"{theirs / statistics.median(t):.2f}x"
        lines.append(
            f"| {label} | {ms(statistics.median(t))} ms | {ms(min(t))}-{ms(max(t))} ms | {speedup} | {profiled} |"
        )
    ref, ours = result["isaac_gr00t"]["components"], result["vlabench_community"]["components"]
    lines += [
        "",
        "| component | forward host time: Isaac-GR00T | vlabench community | aten ops: Isaac-GR00T | vlabench community |",
        "|---|---|---|---|---|",
    ]
    outside = next(k for k in ref["ops"] if k.startswith("outside"))
    for name in (*COMPONENTS, outside):
        host = [f"{c['forward_host_ms'][name]:.1f} ms" if name in c["forward_host_ms"] else "-" for c in (ref, ours)]
        ops = [str(c["ops"].get(name, {}).get("total", 0)) for c in (ref, ours)]
        lines.append(f"| {name} | {host[0]} | {host[1]} | {ops[0]} | {ops[1]} |")
    totals = [sum(v["total"] for v in c["ops"].values()) for c in (ref, ours)]
    whole = [f"{c['forward_host_ms']['whole step (host)']:.1f} ms" for c in (ref, ours)]
    lines.append(f"| whole step (forward, backward, optimizer) | {whole[0]} | {whole[1]} | {totals[0]} | {totals[1]} |")
    lines.append("")
    for key in ("isaac_gr00t", "vlabench_community"):
        sites = {site: n for site, n in result[key]["sync_sites"]["by_site"].items() if is_real_sync(site)}
        where = ", ".join(f"{n} at `{site}`" for site, n in sites.items()) or "none"
        lines.append(f"Host syncs per step, {SIDE_NAMES[key]}: {sum(sites.values())} ({where}).")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, help="where the result goes (JSON)")
    parser.add_argument(
        "--table",
        type=Path,
        nargs="+",
        help="print the docs' tables instead (no GPU needed): a summary row per result, then each one's details",
    )
    parser.add_argument("--dataset", type=Path, help="also time both sides with their data paths over this dataset")
    parser.add_argument("--data-steps", type=int, default=100, help="timed steps of each data-path side")
    parser.add_argument("--data-only", action="store_true", help="only the data-path sides (needs --dataset)")
    parser.add_argument(
        "--data-repeats", type=int, default=1, help="data-path pairs, alternated theirs, ours, theirs, ..."
    )
    parser.add_argument("--target", default="h200", help="vlabench's target for its community rung")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="each data-path pair also times our community rung inside this process (after ours in its own)",
    )
    parser.add_argument(
        "--size",
        default="full",
        choices=("full", "full-252"),
        help="our community rung's model size on its data path (full-252: the reference's 252-pixel views)",
    )
    args = parser.parse_args()
    if args.table:
        results = {path.stem: json.loads(path.read_text()) for path in args.table}
        details = [
            f"**{name}** ({r['device']}, torch {r['torch']}, batch {r['batch']}):\n\n{render_tables(r)}"
            for name, r in results.items()
        ]
        print("\n\n".join([render_summary(results), *details]))
        return 0
    if args.out is None:
        parser.error("--out or --table is required")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    result = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "batch": BATCH,
        "vlabench_commit": os.environ.get("VLABENCH_GIT_SHA"),
        "vlabench_dirty": os.environ.get("VLABENCH_GIT_DIRTY"),
    }
    if args.dataset is not None:
        result["dataset"] = str(args.dataset)
    if args.data_only:
        data_paths(
            result, args.dataset, args.data_steps, args.target, args.out, args.data_repeats, args.size, args.in_process
        )
        return 0
    # the reference first: our compile rung leaves a large Python heap (dynamo's and inductor's objects) that
    # every later garbage collection would scan
    sides = [(name, lambda o=o, n=name: vlabench_step(o, n == "vlabench_community")) for name, o in RUNGS.items()]
    for name, run in [("isaac_gr00t", isaac_step), *sides]:
        measure_side(result, name, run, report_step_side, args.out)
    # the reference timed again after our rungs: how much the order and the host's drift move it
    gc.collect()
    try:
        result["isaac_gr00t_again"] = isaac_step(detail=False)
        t = result["isaac_gr00t_again"]["step_times_s"]
        print(f"isaac_gr00t again: median {1000 * statistics.median(t):.1f} ms (min {1000 * min(t):.1f})")
    except Exception as e:
        result["isaac_gr00t_again"] = {"error": f"{type(e).__name__}: {e}"}
    args.out.write_text(json.dumps(result, indent=1))
    if "step_times_s" in result["isaac_gr00t"]:
        theirs = reference_median(result)
        for name in RUNGS:
            if "step_times_s" in result[name]:
                ours = statistics.median(result[name]["step_times_s"])
                result[name]["over_isaac_gr00t"] = ours / theirs
                print(f"{name} step / Isaac-GR00T step: {ours / theirs:.3f} (speedup {theirs / ours:.2f}x)")
        if "over_isaac_gr00t" in result["vlabench_community"]:
            result["ours_over_theirs"] = result["vlabench_community"]["over_isaac_gr00t"]
        args.out.write_text(json.dumps(result, indent=1))
    if args.dataset is not None:
        data_paths(
            result, args.dataset, args.data_steps, args.target, args.out, args.data_repeats, args.size, args.in_process
        )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
