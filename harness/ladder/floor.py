"""The kernel floor of a workload on a device (`vlabench floor`): every GEMM of forward and backward at the
vendor library's speed for its exact shape (torch.mm, i.e. cuBLAS, in the workload's dtype; FP8 through
torch._scaled_mm where the FP8 rung would convert the layer), plus each attention call at the best implementation
available here (SDPA, and FlexAttention with the real block mask on a GPU), summed into the step time nothing can
beat and its samples/s. On a GPU both are timed as back-to-back calls replayed from a CUDA graph, so that a call of a
few microseconds is not timed as the host's launch latency (and an attention call's autograd work). A rung's share
of the floor says how much of the step is left to win.

Only the work of the step's GEMMs and attention counts: no elementwise kernels, norms, casts, optimizer or
launch gaps, which a perfect implementation would fuse or hide. So the floor is an upper bound on samples/s.
"""

from __future__ import annotations

import contextlib
import json
import statistics
from collections.abc import Callable

import torch

from models import get_family
from models.family import TORCH_DTYPES
from models.floor import Attention, Gemm, floor_flops, training_gemms
from models.fp8 import ALIGNMENT, MIN_FEATURES
from models.workload import Workload

from .. import kinds
from ..machine.hardware import get_device
from ..scenario import recorded_workload, workload_keys
from ..spec import RungSpec

REPEATS = 10  # timed runs per shape (after warm-up); the median counts
GRAPH_LAUNCHES = 20  # GEMM calls per timed CUDA graph replay
ATTENTION_LAUNCHES = 10  # attention calls (forward and backward) per timed CUDA graph replay


def _time(fn: Callable[[], object], device, repeats: int = REPEATS, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    device.synchronize()
    times = []
    for _ in range(repeats):
        start, end = device.event(), device.event()
        start.record()
        fn()
        end.record()
        times.append(device.elapsed_s(start, end))
    return statistics.median(times)


def fp8_eligible(layer: Gemm) -> bool:
    """torchao's FP8 training converts a linear whose two sides (features in and out) are aligned and at least
    MIN_FEATURES wide (models/fp8.py's rule), among those the family's FP8 rung converts (`Gemm.fp8`); all three
    of its GEMMs then run in FP8."""
    return layer.fp8 and all(s % ALIGNMENT == 0 and s >= MIN_FEATURES for s in (layer.n, layer.k))


def _time_launches(fn: Callable[[], object], device, launches: int = GRAPH_LAUNCHES) -> float:
    """Seconds of one call of `fn`, the device's own time: on CUDA `launches` calls captured back to back in one
    CUDA graph and its replays timed. Timed one launch at a time, a GEMM that runs for a few microseconds
    measures the host's launch latency instead (the device idles between the start event and the kernel)."""
    if device.torch_device.type != "cuda":
        return _time(fn, device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture: library handles and workspaces
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            fn()
    return _time(graph.replay, device) / launches


def time_gemm(m: int, n: int, k: int, dtype: torch.dtype, device, fp8: bool = False) -> float:
    """Seconds of one [m, k] x [k, n] product: in `dtype`, or FP8 e4m3 with per-tensor scales and bf16 output."""
    dev = device.torch_device
    a = torch.randn(m, k, device=dev).to(dtype)
    b = torch.randn(k, n, device=dev).to(dtype)
    if not fp8:
        return _time_launches(lambda: torch.mm(a, b), device)
    m16 = -(-m // ALIGNMENT) * ALIGNMENT  # _scaled_mm wants aligned rows too
    a8 = torch.randn(m16, k, device=dev).to(torch.float8_e4m3fn)
    b8 = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()  # column-major, as cuBLAS FP8 wants
    one = torch.ones((), device=dev)
    scaled = lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
    return _time_launches(scaled, device)


def _attention_inputs(att: Attention, dtype, dev):
    def t(h, length):
        return torch.randn(att.batch, h, length, att.head_dim, device=dev, dtype=dtype, requires_grad=att.backward)

    return t(att.heads, att.q_len), t(att.kv_heads, att.kv_len), t(att.kv_heads, att.kv_len)


def _mask_mod(att: Attention):
    """Which key a query may read, as FlexAttention's mask_mod (None: every key)."""
    if att.mask == "causal":
        return lambda b, h, qi, ki: ki <= qi
    if att.mask == "prefix-suffix":
        return lambda b, h, qi, ki: (ki < att.prefix) | (qi >= att.prefix)  # prefix sees the prefix; actions all
    return None


def _allowed(att: Attention, dev) -> torch.Tensor | None:
    """SDPA's boolean mask; None for none and for causal (SDPA's is_causal, which its flash kernel takes)."""
    mod = _mask_mod(att)
    if mod is None or att.mask == "causal":
        return None
    return mod(None, None, torch.arange(att.q_len, device=dev)[:, None], torch.arange(att.kv_len, device=dev)[None, :])


def time_attention(att: Attention, dtype: torch.dtype, device) -> dict:
    """Forward (and backward) of one attention call by each implementation that runs here; the best counts."""
    import torch.nn.functional as F

    dev = device.torch_device
    q, k, v = _attention_inputs(att, dtype, dev)
    allowed, causal = _allowed(att, dev), att.mask == "causal"
    gqa = att.kv_heads != att.heads

    def run(attend):
        def once():
            out = attend(q, k, v)
            if att.backward:
                out.backward(torch.ones_like(out))

        return once

    def sdpa(backend=None):
        def attend(q, k, v):
            with sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext():
                return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, is_causal=causal, enable_gqa=gqa)

        return attend

    candidates = {"sdpa": sdpa()}  # the backend SDPA picks itself: what the model's `sdpa` kind runs
    if dev.type == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        # each of SDPA's fused backends alone, to see whether its own pick is the fastest for these shapes
        for name, backend in (
            ("flash", SDPBackend.FLASH_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION),
            ("cudnn", SDPBackend.CUDNN_ATTENTION),
        ):
            candidates[f"sdpa-{name}"] = sdpa(backend)
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        mod = _mask_mod(att)
        block = None if mod is None else create_block_mask(mod, None, None, att.q_len, att.kv_len, device=dev)
        flex = torch.compile(flex_attention, dynamic=False)
        candidates["flex"] = lambda q, k, v: flex(q, k, v, block_mask=block, enable_gqa=gqa)
    times, how = {}, {}
    for name, attend in candidates.items():
        try:
            times[name], how[name] = _time_attention_call(run(attend), device)
        except Exception as exc:  # an implementation that cannot run these shapes here is not the best one
            times[name] = _error(exc)
    best = min((t, n) for n, t in times.items() if isinstance(t, float))
    return {
        "name": att.name,
        "count": att.count,
        "backward": att.backward,
        "by_implementation_s": times,
        "timed": how,
        "best": best[1],
        "s": best[0],
    }


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


def _time_attention_call(once: Callable[[], None], device) -> tuple[float, str]:
    """Seconds of one attention call (forward, and backward where it has one) and how it was timed: like a GEMM,
    replayed back to back from a CUDA graph on CUDA, since a call of a few tens of microseconds (GR00T's DiT
    attends over 51 queries) timed alone measures the host's launch and autograd work instead. Where a graph
    cannot hold the call, it is timed one call at a time, and says so."""
    if device.torch_device.type != "cuda":
        return _time(once, device), "per call"
    try:
        return _time_launches(once, device, ATTENTION_LAUNCHES), "graph"
    except Exception as exc:
        torch.cuda.synchronize()
        return _time(once, device), f"per call (graph capture failed: {_error(exc)})"


def measure_floor(family, size: str, workload: Workload, device, with_fp8: bool, progress=print) -> dict:
    """The floor of `workload` on `device`: per-shape times, totals and samples/s in the workload's dtype and,
    `with_fp8` (the device has FP8), with the FP8 rung's linears in FP8 too."""
    forward, attention = family.floor_ops(size, workload)
    dtype = TORCH_DTYPES[workload.dtype]
    gemms, cache = [], {}
    base = workload.dtype  # the workload's own precision (bf16 on GPUs), and FP8 beside it where the device has it
    precisions = (base, "fp8") if with_fp8 else (base,)
    for layer, step, m, n, k in training_gemms(forward):
        for precision in precisions:
            use_fp8 = precision == "fp8" and fp8_eligible(layer)
            key = (m, n, k, use_fp8)
            if key not in cache:
                cache[key] = time_gemm(m, n, k, dtype, device, fp8=use_fp8)
            gemms.append(
                {
                    "name": f"{layer.name} {step}",
                    "m": m,
                    "n": n,
                    "k": k,
                    "count": layer.count,
                    "precision": precision,
                    "fp8": use_fp8,
                    "s": cache[key],
                }
            )
    progress(f"floor: {len(cache)} GEMM shapes timed")
    attn = [time_attention(a, dtype, device) for a in attention]
    progress(f"floor: {len(attn)} attention calls timed")
    attention_s = sum(a["s"] * a["count"] for a in attn)
    batch = workload.batch_size
    totals = {}
    for precision in precisions:
        gemm_s = sum(g["s"] * g["count"] for g in gemms if g["precision"] == precision)
        step = gemm_s + attention_s
        totals[precision] = {
            "gemm_s": gemm_s,
            "attention_s": attention_s,
            "step_s": step,
            "samples_per_s": batch / step,
        }
    return {
        "dtype": workload.dtype,
        "flops": floor_flops(forward, attention),  # per step, GEMMs and attention (models/floor.py)
        "gemm_shapes": len(cache),
        "gemms": gemms,
        "attention": attn,
        "totals": totals,
    }


def floor_share(rung: dict, floor: dict | None, fp8_linears: bool) -> float | None:
    """A rung's samples/s over the floor's of the precision it trains in: the FP8 floor, when measured, for a rung
    whose linears train in FP8 (`fp8_linears`, the model family's reading of the rung's options)."""
    if not floor or rung.get("status") != "ok":
        return None
    totals = floor["totals"]
    fp8 = fp8_linears and "fp8" in totals
    return rung["samples_per_s"] / totals["fp8" if fp8 else floor["dtype"]]["samples_per_s"]


# A floor stands for the ladders of its scenario and target whose `workload` block has the same values at every key
# but these, which do not shape the step's GEMMs and attention calls (each with why); a field added to the workload
# keeps a floor from ladders that differ in it until it is listed here.
FLOOR_NOT_COMPARED = {
    "warmup_steps": "the floor times each shape its own REPEATS times, not the workload's steps",
    "timed_steps": "the floor times each shape its own REPEATS times, not the workload's steps",
    "seed": "the floor's operands are random: their values do not change a GEMM's time",
    "lr": "the optimizer's update is not in the floor (GEMMs and attention only)",
    "compile_backend": "the floor calls torch.mm and the attention kernels directly, never compiled code",
    "data": "where batches come from: the family's floor_ops reads the shapes from the model's workload, which has none",
    "flops_per_sample": "derived from the other keys by the family's FLOP count",
}
FLOOR_WORKLOAD = workload_keys(FLOOR_NOT_COMPARED)


def attach_floors(results: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """The results, where a one-process ladder without a floor of its own takes the floor of a `vlabench floor`
    result among them of the same scenario, target and workload shape (the newest), so that its table shows each
    rung's share; the attached floor records its file (`from`)."""
    floors = sorted(
        ((p, r) for p, r in results if kinds.kind_of(r).provides_floor and "totals" in (r.get("floor") or {})),
        key=lambda x: x[1]["provenance"]["created_at"],
    )

    def key(result: dict) -> str:
        w = recorded_workload(result.get("workload") or {})
        same = [result["scenario"]["name"], result["target"]["name"], *(w.get(k) for k in FLOOR_WORKLOAD)]
        return json.dumps(same, sort_keys=True)  # a field of any JSON value makes a key

    newest = {key(r): {**r["floor"], "from": p} for p, r in floors}
    out = []
    for path, result in results:
        one_device = (result.get("nproc") or 1) == 1  # the floor is one device's; a DDP ladder's samples/s are not
        if kinds.kind_of(result).in_compare_columns and one_device and "floor" not in result and key(result) in newest:
            result = {**result, "floor": newest[key(result)]}
        out.append((path, result))
    return out


def main(argv: list[str]) -> int:
    """`python -m harness.ladder.floor SPEC.json OUT.json`: the floor in a process of its own (the runner's stays free of
    the GPU), SPEC a harness.spec.RungSpec: model, backend, workload and whether the device has FP8."""
    spec_path, out_path = argv
    with open(spec_path) as f:
        spec = RungSpec.from_dict(json.load(f))
    device = get_device(spec.backend)
    family = get_family(spec.model)
    floor = measure_floor(family, spec.workload.model_size, spec.workload, device, spec.floor_fp8)
    with open(out_path, "w") as f:
        json.dump(floor, f)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
