"""Isaac-GR00T's own N1.6 fine-tuning step beside vlabench's community rung, timed the same way on the same GPU.

Run by run.sh on the device machine with .isaac/ carried (prepare.sh). Both sides run one training step per
batch of 16 samples (2 views 224x224, a 220-token VL sequence, 50-step action chunks padded to 128-d), the batch
already on the GPU: forward and backward under bf16 autocast with TF32, gradient clipping at 1.0, torch AdamW
(foreach) over the fine-tuned parameters (frozen vision and lower LLM layers; the top 4 LLM layers, projector,
vlln and action head trainable). Warm-up steps excluded; every step between CUDA events; then 3 steps of each
side under torch.profiler (kernel time, device idle, launches, top kernels and host operators per step).

Isaac-GR00T's side is their unmodified code (`Gr00tN1d6`, their collator and their random init), with what it
takes to run it without flash-attn, applied at run time here and nowhere in vlabench:
- transformers' flash-attn availability check is skipped (their Eagle config asks for flash_attention_2);
- the Qwen3 LLM runs SDPA (the same math as their flash-attn path over unpadded tokens);
- SigLIP2's packed-sequence attention (flash-attn varlen over all images at once) is replaced by one batched
  SDPA over the images, each attending to itself only, as varlen does;
- their random init names two SigLIP2 classes its file never defines: empty stand-ins are registered.
So the comparison leaves out any flash-attn-2 versus SDPA difference.
"""

from __future__ import annotations

import argparse
import builtins
import json
import os
import statistics
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
BATCH, VL_TOKENS, HORIZON, WARMUP, TIMED = 16, 220, 50, 5, 20
BASE_INSTRUCTION = "pick up the black bowl between the plate and the ramekin and place it on the plate"


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
    launches and top kernels per step (harness/profile.py's summary), and the host operators with the most CPU
    time of their own."""
    from harness.profile import kernel_summary

    walls, hosts = [], []
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for i in range(steps):
            torch.manual_seed(WARMUP + TIMED + i)
            start = time.perf_counter()
            step(batch)
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
    summary["python_top"] = python_profile(step, batch)
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


def isaac_step() -> dict:
    src = ROOT / ".isaac"
    package = types.ModuleType("gr00t.model")  # their gr00t/model/__init__.py imports the data pipeline
    package.__path__ = [str(src / "gr00t" / "model")]
    import gr00t  # noqa: F401

    sys.modules["gr00t.model"] = package
    from transformers import PreTrainedModel

    PreTrainedModel._check_and_enable_flash_attn_2 = classmethod(lambda cls, config, *a, **k: config)
    builtins.Siglip2Model = type("Siglip2Model", (), {})
    builtins.Siglip2ForImageClassification = type("Siglip2ForImageClassification", (), {})
    from gr00t.configs.model.gr00t_n1d6 import Gr00tN1d6Config
    from gr00t.model.gr00t_n1d6.gr00t_n1d6 import Gr00tN1d6
    from PIL import Image

    t0 = time.perf_counter()
    model = Gr00tN1d6(Gr00tN1d6Config(max_state_dim=128, max_action_dim=128, action_horizon=HORIZON))
    built_s = time.perf_counter() - t0
    sys.modules[
        type(model.backbone.model.vision_model).__module__
    ].flash_attention_forward_for_packing = packed_image_sdpa
    model.backbone.model.language_model.config._attn_implementation = "sdpa"
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

    # an instruction whose VL sequence is 220 tokens, as the community rung's
    words = (" and then ".join([BASE_INSTRUCTION] * 4)).split()
    for n in range(len(words), 0, -1):
        instruction = " ".join(words[:n])
        if model.collator([sample(instruction)])["inputs"]["input_ids"].shape[1] <= VL_TOKENS:
            break
    batch = model.collator([sample(instruction) for _ in range(BATCH)])["inputs"]
    model = model.cuda().train()
    batch = {k: v.cuda() if torch.is_tensor(v) else v for k, v in batch.items()}
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-5)
    step = train_step(model, params, optimizer, lambda m, b: m(b)["loss"])
    times = time_steps(step, batch)
    profile = profile_steps(step, batch)
    return step_record(model, times, int(batch["input_ids"].shape[1]), built_s=built_s, profile=profile)


def vlabench_step() -> dict:
    sys.path.insert(0, str(ROOT))
    from models.gr00t import FAMILY

    workload = {
        "batch_size": BATCH,
        "cameras": 2,
        "text_tokens": VL_TOKENS - 128,
        "action_horizon": HORIZON,
        "dtype": "bf16",
        "lr": 1e-4,
        "model_size": "full",
    }
    # the community rung's options, with the VL sequence left-padded to 220 tokens (masked) so that both sides run
    # the same sequence length (the synthetic prompts are shorter; their collator gives 220 for the instruction)
    options = FAMILY.parse_options({"attention": "sdpa", "lm_head": True, "compile": "none", "vl_pad": VL_TOKENS})
    model = FAMILY.build("full", options, workload, "cuda", torch.bfloat16, 0).model
    optimizer = FAMILY.optimizer(model, options, workload, "cuda")
    step = FAMILY.make_step(model, optimizer, options)  # autocast, backward, clip 1.0, AdamW, zero_grad
    batch = FAMILY.make_batches("full", workload, 1, "cuda", torch.bfloat16, 0)[0]
    prompt = int(batch["input_ids"].shape[1])
    times = time_steps(step, batch)
    profile = profile_steps(step, batch)
    return step_record(model, times, max(prompt, VL_TOKENS), prompt_tokens=prompt, profile=profile)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    result = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "batch": BATCH,
        "vlabench_commit": os.environ.get("VLABENCH_GIT_SHA"),
        "vlabench_dirty": os.environ.get("VLABENCH_GIT_DIRTY"),
    }
    for name, run in (("vlabench_community", vlabench_step), ("isaac_gr00t", isaac_step)):
        try:
            result[name] = run()
            times = result[name]["step_times_s"]
            print(
                f"{name}: median {1000 * statistics.median(times):.1f} ms (min {1000 * min(times):.1f}, max "
                f"{1000 * max(times):.1f}), VL {result[name]['vl_tokens']} tokens, "
                f"{result[name]['trainable'] / 1e9:.3f}B of {result[name]['params'] / 1e9:.3f}B trainable"
            )
            p = result[name]["profile"]
            print(
                f"  profiled: kernels {1000 * p['kernel_s']:.1f} ms of {1000 * p['wall_s']:.1f} ms per step, "
                f"{p['kernel_launches']:.0f} launches, device idle {1000 * p['idle_s']:.1f} ms, host done after "
                f"{1000 * p['host_s']:.1f} ms"
            )
            for row in p["top_kernels"][:5] + p["top_host_ops"][:8] + p["syncs"] + p["python_top"]["by_own_time"][:12]:
                print("   ", json.dumps(row))
        except Exception as e:  # keep the other side's measurement
            import traceback

            result[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
            print(result[name]["traceback"])
        torch.cuda.empty_cache()  # the side's model and optimizer went with its function
        args.out.write_text(json.dumps(result, indent=1))
    if all("step_times_s" in result[k] for k in ("vlabench_community", "isaac_gr00t")):
        ours = statistics.median(result["vlabench_community"]["step_times_s"])
        theirs = statistics.median(result["isaac_gr00t"]["step_times_s"])
        result["ours_over_theirs"] = ours / theirs
        print(f"vlabench community step / Isaac-GR00T step: {ours / theirs:.3f}")
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
