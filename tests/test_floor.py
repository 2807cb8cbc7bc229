"""The kernel floor: the GEMMs of a training step with their exact shapes (forward, and backward derived from
them), timed at the vendor library's speed, with the attention calls, summed into samples/s; a run records it
and each rung's share of it."""

from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.ladder.floor import floor_share, fp8_eligible
from harness.report.report import floor_table
from harness.results import load_result
from models.floor import training_gemms
from models.pi05 import FAMILY, FULL
from models.pi05.flops import floor_ops, forward_flops_per_sample
from models.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = Workload(batch_size=32, cameras=2, text_tokens=200, action_horizon=50)


def test_training_gemms_are_forward_plus_both_gradients():
    forward, _ = floor_ops(FULL, **{"batch": 32, "cameras": 2, "text_tokens": 200, "action_horizon": 50})
    gemms = training_gemms(forward)
    for layer in forward:
        passes = {step: (m, n, k) for g, step, m, n, k in gemms if g is layer}
        assert passes["fwd"] == (layer.m, layer.n, layer.k)
        assert passes.get("dX") == ((layer.m, layer.k, layer.n) if layer.input_grad else None)
        assert passes["dW"] == (layer.n, layer.k, layer.m)  # every Pi0.5 weight trains
    # the GEMM FLOPs are the analytic linear FLOPs of the step: 3x forward, less the gradients of raw inputs and
    # less the last layer's prefix tail (its queries, output projection and MLP: the loss reads only its K and V)
    total = sum(2 * m * n * k * g.count for g, _, m, n, k in gemms) / 32
    fwd = forward_flops_per_sample(FULL, 2, 200, 50)
    siglip_attention = 2 * 2 * FULL.vision.layers * 2 * FULL.vision.tokens**2 * FULL.vision.width  # FLOPs, 2 cameras
    linear_fwd = sum(fwd.values()) - fwd["attention"] - siglip_attention
    raw_inputs = 2 * (2 * 256 * 3 * 14 * 14 * 1152 + 50 * 32 * 1024)  # patch embedding and action-in dX
    llm = FULL.llm
    tail = 2 * (2 * 256 + 200) * (2 * llm.width * llm.heads * llm.head_dim + 3 * llm.width * llm.mlp)
    assert total == pytest.approx(3 * (linear_fwd - tail) - raw_inputs, rel=1e-6)


def test_the_floor_counts_only_the_last_layers_prefix_keys_and_values():
    forward, attention = floor_ops(FULL, 32, 2, 200, 50)
    counts = {g.name: g.count for g in forward}
    layers = FULL.llm.layers
    assert counts["gemma kv"] == 2 * layers and counts["gemma q"] == counts["gemma o"] == layers - 1
    assert counts["gemma gate/up"] == 2 * (layers - 1) and counts["gemma down"] == layers - 1
    assert counts["expert q"] == counts["expert o"] == FULL.expert.layers  # the actions' stream runs every layer
    joint, last = (a for a in attention if a.name.startswith("joint"))
    assert joint.count == layers - 1 and joint.mask == "prefix-suffix"
    assert (last.count, last.q_len, last.kv_len, last.mask) == (1, 50, 2 * 256 + 200 + 50, "none")


def test_fp8_follows_the_conversion_rule():
    forward, _ = floor_ops(FULL, 32, 2, 200, 50)
    by_name = {g.name: fp8_eligible(g) for g in forward}
    assert by_name["gemma gate/up"] and by_name["gemma q"] and by_name["siglip fc1"]
    assert not by_name["gemma kv"]  # 256 wide: too thin for FP8 to pay
    assert not by_name["action in"] and not by_name["action out"]


def test_share_of_the_floor_uses_the_rungs_precision():
    """The FP8 floor for a rung whose linears train in FP8, as the model family reads the rung's options."""
    from harness.report.report import floor_note
    from models import get_family

    floor = {"dtype": "bf16", "totals": {"bf16": {"samples_per_s": 60.0}, "fp8": {"samples_per_s": 100.0}}}
    assert floor_share({"status": "ok", "samples_per_s": 45.0}, floor, fp8_linears=False) == 0.75
    assert floor_share({"status": "ok", "samples_per_s": 50.0}, floor, fp8_linears=True) == 0.5
    assert floor_share({"status": "error"}, floor, False) is None and floor_share({"status": "ok"}, None, False) is None
    for family in ("pi05", "gr00t"):
        knobs = get_family(family).knobs({"linear": "fp8"})
        assert floor_note({"status": "ok", "samples_per_s": 50.0}, {"floor": floor}, knobs) == "50% of the kernel floor"


SCENARIO = """
name: floor-test
model: pi05
workload: {batch_size: 2, cameras: 2, text_tokens: 16, action_horizon: 4, warmup_steps: 1, timed_steps: 2,
           seed: 0, dtype: fp32}
ladder:
  - {name: community, options: {camera_slots: auto, recompute: none}}
targets:
  cpu: {model_size: tiny}
"""


@pytest.mark.slow
def test_a_run_records_the_floor_and_the_table_shows_each_rungs_share(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    assert (
        main(["run", str(scenario), "--target", "cpu", "--floor", "--repeats", "1", "--out", str(tmp_path / "r.json")])
        == 0
    )
    result = load_result(tmp_path / "r.json")
    totals = result["floor"]["totals"]["fp32"]
    assert totals["step_s"] == pytest.approx(totals["gemm_s"] + totals["attention_s"])
    assert totals["samples_per_s"] == pytest.approx(2 / totals["step_s"])
    assert {a["name"] for a in result["floor"]["attention"]} == {
        "siglip attention",
        "joint attention",
        "joint attention, last layer",
    }
    out = capsys.readouterr().out
    assert "kernel floor fp32" in out and "of the kernel floor" in out
    assert main(["floor", str(scenario), "--target", "cpu", "--out", str(tmp_path / "f.json")]) == 0
    assert load_result(tmp_path / "f.json")["kind"] == "floor" and "GEMMs ms" in capsys.readouterr().out


def test_a_family_without_a_floor_says_so():
    from models import ModelFamily

    with pytest.raises(NotImplementedError, match="no kernel floor for x yet"):
        type("X", (ModelFamily,), {"name": "x"})().floor_ops("tiny", WORKLOAD)
    assert FAMILY.floor_ops("full", WORKLOAD)[0]


@pytest.mark.slow
def test_profile_reports_where_a_rungs_step_goes(tmp_path, capsys):
    import json

    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "p.json"
    assert (
        main(
            ["profile", str(scenario), "--rung", "community", "--target", "cpu", "--steps", "2", "--top", "5"]
            + ["--out", str(out)]
        )
        == 0
    )
    profile = json.loads(out.read_text())
    assert profile["steps"] == 2 and profile["wall_s"] > 0 and profile["data_wait_s"] == 0
    assert profile["provenance"]["command"].startswith("vlabench profile") and profile["provenance"]["torch"]
    assert "ms per step (median of 2)" in capsys.readouterr().out
    assert main(["profile", str(scenario), "--rung", "nope", "--target", "cpu"]) == 2
    assert main(["profile", str(scenario), "--rung", "community", "--target", "cpu", "--top", "0"]) == 2
    assert "--top" in capsys.readouterr().err


GR00T_WORKLOAD = Workload(batch_size=16, cameras=2, text_tokens=92, action_horizon=50)


def _gr00t_raw_input_grads(cfg, horizon: int) -> float:
    """FLOPs per sample of the input gradients the analytic count takes but no step computes: the layers on raw
    inputs (timestep sinusoid, state, noisy actions) in the trainable action head."""
    h, dw = cfg.head, cfg.dit.width
    return 2.0 * (cfg.dit.time_channels * dw + h.state_dim * h.hidden + horizon * h.action_dim * dw)


@pytest.mark.parametrize("size", ["full", "tiny"])
def test_gr00t_floor_flops_are_the_analytic_count_without_the_lm_head(size):
    """The floor's GEMM and attention FLOPs are GR00T's analytic training FLOPs (1.51 TFLOP per sample at full
    size) less the discarded lm_head's forward (a step need not compute it) and less the input gradients of the
    three layers on raw inputs (the analytic count takes backward as 2x forward throughout)."""
    from models.floor import floor_flops
    from models.gr00t import FAMILY as GR00T
    from models.gr00t import SIZES
    from models.gr00t.flops import forward_flops_per_sample

    cfg, w = SIZES[size], GR00T_WORKLOAD
    tokens = w.cameras * cfg.vision.tokens + w.text_tokens
    floor = floor_flops(*GR00T.floor_ops(size, w)) / w.batch_size
    analytic = GR00T.flops_per_sample(size, w)
    lm_head = forward_flops_per_sample(cfg, w.cameras, tokens, w.action_horizon)["lm_head"]
    assert floor == pytest.approx(analytic - lm_head - _gr00t_raw_input_grads(cfg, w.action_horizon), rel=1e-9)
    if size == "full":
        assert analytic == pytest.approx(1.5095e12, rel=1e-4) and floor == pytest.approx(1.37275e12, rel=1e-4)


def test_gr00t_floor_runs_backward_only_through_the_trainable_set():
    """Vision, mlp1 and the 12 bottom LLM layers are frozen with nothing trainable before them: forward only.
    The top 4 LLM layers and the action head get both gradients, but for the layers on raw inputs."""
    from models.gr00t import FAMILY as GR00T

    forward, attention = GR00T.floor_ops("full", GR00T_WORKLOAD)
    passes = {}
    for g, step, *_ in training_gemms(forward):
        passes.setdefault(g.name, set()).add(step)
    assert passes["siglip fc1"] == passes["mlp1 fc1"] == passes["llm frozen gate/up"] == {"fwd"}
    assert passes["llm gate/up"] == passes["dit cross k/v"] == passes["dit ff1"] == {"fwd", "dX", "dW"}
    assert passes["action encoder W1"] == passes["state encoder 1"] == passes["timestep encoder 1"] == {"fwd", "dW"}
    assert "lm_head" not in " ".join(passes)
    counts = {g.name: g.count for g in forward}
    assert counts["llm frozen q"] == 12 and counts["llm q"] == 4 and counts["dit ff1"] == 32
    assert counts["dit self k/v"] == counts["dit cross k/v"] == 32  # 16 self and 16 cross blocks, k and v
    by_name = {a.name: a for a in attention}
    assert by_name["llm attention"].mask == "causal" and by_name["llm attention"].backward
    assert not by_name["llm frozen attention"].backward and not by_name["siglip attention"].backward
    assert (by_name["dit cross-attention"].q_len, by_name["dit cross-attention"].kv_len) == (51, 220)
    assert by_name["siglip attention"].batch == 32 and by_name["siglip attention"].q_len == 256


def test_gr00t_fp8_floor_converts_the_dit_blocks_linears_only():
    """As `linear: fp8` does: the DiT blocks' projections and FeedForward, not their AdaLN, not the backbone."""
    from models.gr00t import FAMILY as GR00T

    forward, _ = GR00T.floor_ops("full", GR00T_WORKLOAD)
    eligible = {g.name for g in forward if fp8_eligible(g)}
    assert eligible == {"dit q", "dit self k/v", "dit cross k/v", "dit out", "dit ff1", "dit ff2"}


@pytest.mark.slow
def test_gr00t_floor_on_the_cpu_and_the_ladder_table_shows_each_rungs_share(tmp_path, capsys):
    """`vlabench floor` on the tiny model, then `vlabench show` of a GR00T ladder beside it: each rung's note gives
    its share of the floor, which the table title names; a ladder of another workload takes none."""
    import json

    from models.gr00t import FAMILY as GR00T
    from models.gr00t import SIZES, forward_flops_per_sample, vl_tokens

    out = tmp_path / "gr00t-loongforge-floor.json"
    scenario = ROOT / "scenarios" / "gr00t-loongforge.yaml"
    assert main(["floor", str(scenario), "--target", "cpu", "--out", str(out)]) == 0
    result = load_result(out)
    floor, w = result["floor"], Workload.from_record(result["workload"])
    assert {a["name"] for a in floor["attention"]} >= {"llm attention", "dit cross-attention"}
    # no CUDA graph on a CPU: each attention call timed alone, and the record says so
    assert all(set(a["timed"].values()) == {"per call"} for a in floor["attention"])
    # SigLIP2 is frozen and nothing before it trains: its attention runs forward only, and the table says so
    backward = {a["name"]: a["backward"] for a in floor["attention"]}
    assert backward["siglip attention"] is False and backward["dit cross-attention"] is True
    table = floor_table(result, top=1000)
    assert "siglip attention fwd (" in table and "dit cross-attention fwd+bwd (" in table
    cfg, tokens = SIZES["tiny"], vl_tokens("tiny", w)
    lm_head = forward_flops_per_sample(cfg, w.cameras, tokens, w.action_horizon)["lm_head"]
    analytic = GR00T.flops_per_sample("tiny", w)
    raw_inputs = _gr00t_raw_input_grads(cfg, w.action_horizon)
    assert floor["flops"] / w.batch_size == pytest.approx(analytic - lm_head - raw_inputs, rel=1e-9)
    totals = floor["totals"]["fp32"]
    assert totals["samples_per_s"] == pytest.approx(w.batch_size / totals["step_s"])
    capsys.readouterr()
    # beside the committed H200 ladder, the floor relabelled to its target and workload: each rung's share
    ladder_path = ROOT / "results" / "h200" / "gr00t-loongforge.json"
    ladder = load_result(ladder_path)
    relabelled = tmp_path / "floor.json"
    relabelled.write_text(json.dumps({**result, "target": ladder["target"], "workload": ladder["workload"]}))
    assert main(["show", str(ladder_path), str(relabelled)]) == 0
    shown = capsys.readouterr().out
    assert f"kernel floor fp32 {totals['samples_per_s']:.1f} samples/s (from {relabelled})" in shown
    community = next(r for r in ladder["rungs"] if r["name"] == "community")
    assert f"{community['samples_per_s'] / totals['samples_per_s']:.0%} of the kernel floor" in shown
    # a floor of another workload (the tiny CPU one as measured) stands for no ladder
    assert main(["show", str(ladder_path), str(out)]) == 0
    assert "of the kernel floor" not in capsys.readouterr().out


def test_a_floor_measured_apart_serves_only_one_process_ladders_of_its_workload():
    from harness.ladder.floor import attach_floors

    w = {"model": "gr00t", "model_size": "full", "batch_size": 16, "dtype": "bf16"}

    def res(kind=None, created="t1", **extra):
        head = {"scenario": {"name": "s"}, "target": {"name": "h200"}, "workload": dict(w)}
        floor = {"floor": {"dtype": "bf16", "totals": {"bf16": {"samples_per_s": float(created[-1])}}}}
        return {**head, **({"kind": kind, **floor} if kind else {}), "provenance": {"created_at": created}, **extra}

    ladder, ddp, own = res(), res(nproc=2), res(floor={"totals": {}})
    other = {**res(), "workload": {**w, "batch_size": 8}}
    results = [("l", ladder), ("d", ddp), ("o", own), ("b", other), ("f2", res("floor", "t2")), ("f1", res("floor"))]
    attached = dict(attach_floors(results))
    assert attached["l"]["floor"]["from"] == "f2" and attached["l"]["floor"]["totals"]["bf16"]["samples_per_s"] == 2
    assert "floor" not in attached["d"] and "floor" not in attached["b"] and attached["o"] is own
    assert "floor" not in ladder  # the results given are not changed


def test_a_floor_is_not_reused_for_a_ladder_of_another_prompt_padding_or_state():
    """The floor's key is every workload key but the documented ones that shape no GEMM: a ladder whose state is
    padded otherwise (a longer prompt) or left out keeps no floor; a file older than those fields ran at their
    defaults; the steps, seed, learning rate and dataset do not change the floor's shapes."""
    from harness.ladder.floor import FLOOR_NOT_COMPARED, FLOOR_WORKLOAD, attach_floors
    from harness.scenario import Workload

    assert set(FLOOR_WORKLOAD) == set(Workload.record_keys()) - set(FLOOR_NOT_COMPARED)
    assert {"state_pad", "robot_state"} <= set(FLOOR_WORKLOAD)
    w = {"model": "pi05", "model_size": "full", "batch_size": 32, "dtype": "bf16", "state_pad": 32, "robot_state": True}

    def res(workload, kind=None):
        floor = {"floor": {"dtype": "bf16", "totals": {"bf16": {"samples_per_s": 100.0}}}} if kind else {}
        head = {"scenario": {"name": "s"}, "target": {"name": "h200"}, "provenance": {"created_at": "t1"}}
        return {**head, "workload": workload, **({"kind": kind} if kind else {}), **floor}

    older = {k: v for k, v in w.items() if k not in ("state_pad", "robot_state")}
    ladders = {
        "same": w,
        "older": older,
        "steps, seed, lr, dataset": {**w, "timed_steps": 100, "seed": 3, "lr": 1e-4, "data": {"dataset": "d"}},
        "state_pad": {**w, "state_pad": 8},
        "robot_state": {**w, "robot_state": False},
    }
    attached = dict(attach_floors([*((n, res(x)) for n, x in ladders.items()), ("f", res(w, "floor"))]))
    assert [n for n in ladders if "floor" in attached[n]] == ["same", "older", "steps, seed, lr, dataset"]


def test_device_gaps_split_idle_time_by_size_and_name_the_kernels_around_the_largest():
    """Kernels overlapping on two streams count once in the busy time; the gaps between the kernels' union fall
    into the size classes, per step; the largest gaps name the kernels on either side."""
    from harness.ladder.profile import device_gaps, profile_table

    kernels = [  # (start_us, end_us, name) over 2 steps
        (0, 100, "gemm"),
        (50, 120, "copy on a side stream"),  # overlaps gemm: 20 us of new busy time
        (125, 200, "norm"),  # 5 us after the union's end
        (250, 300, "gelu"),  # 50 us
        (800, 900, "gemm"),  # 500 us: the host
        (904, 1000, "adamw"),  # 4 us
    ]
    d = device_gaps(kernels, steps=2, top=2)
    assert d["busy_s"] == pytest.approx((120 + 75 + 50 + 100 + 96) / 1e6 / 2)
    assert d["gaps"]["under_10us"] == {"count_per_step": 1.0, "ms_per_step": pytest.approx(9 / 1e3 / 2)}
    assert d["gaps"]["10_to_100us"] == {"count_per_step": 0.5, "ms_per_step": pytest.approx(50 / 1e3 / 2)}
    assert d["gaps"]["over_100us"] == {"count_per_step": 0.5, "ms_per_step": pytest.approx(500 / 1e3 / 2)}
    assert d["gap_s"] == pytest.approx(559 / 1e6 / 2)
    assert d["largest_gaps"] == [
        {"us": 500, "after": "gelu", "before": "gemm"},
        {"us": 50, "after": "norm", "before": "gelu"},
    ]
    profile = {
        "wall_s": 0.6e-3, "steps": 2, "data_wait_s": 0.0, "device_busy_share": 0.7, "kernel_s": 0.4e-3,
        "kernel_launches": 3, "idle_s": 0.2e-3, "top_kernels": [], "device": d,
    }  # fmt: skip
    text = profile_table("toy", profile)
    assert (
        "gaps between kernels 0.3 ms: under 10 us: 1.0 (0.0 ms), 10-100 us: 0.5 (0.0 ms), over 100 us: 0.5 (0.2 ms)"
        in text
    )
    assert "gap of 500 us after gelu before gemm" in text


def test_large_gaps_name_their_streams_and_where_in_their_step_they_fall():
    """Given the steps' spans on the device timeline, each large gap says its step and how far into it, or that it
    lies between two steps, and the idle time between steps adds up on its own; kernels carry their streams."""
    from harness.ladder.profile import device_gaps, profile_table

    kernels = [  # (start_us, end_us, name, stream) over 2 steps, spans [0, 1000) and [3000, 4000)
        (0, 400, "gemm", 7),
        (700, 1000, "adamw", 7),  # 300 us inside step 1, 400 us into it
        (3000, 3500, "gemm", 7),  # 2000 us between the steps
        (3600, 4000, "adamw", 9),  # 100 us inside step 2, on another stream
    ]
    d = device_gaps(kernels, steps=2, top=3, spans=[(0, 1000), (3000, 4000)])
    assert d["between_steps_ms_per_step"] == pytest.approx(2000 / 1e3 / 2)
    assert d["largest_gaps"] == [
        {"us": 2000, "after": "adamw", "before": "gemm", "after_stream": 7, "before_stream": 7, "step": None},
        {
            "us": 300, "after": "gemm", "before": "adamw", "after_stream": 7, "before_stream": 7,
            "step": 0, "at_ms": 0.4, "step_ms": 1.0,
        },
        {
            "us": 100, "after": "gemm", "before": "adamw", "after_stream": 7, "before_stream": 9,
            "step": 1, "at_ms": 0.5, "step_ms": 1.0,
        },
    ]  # fmt: skip
    profile = {
        "wall_s": 2e-3, "steps": 2, "data_wait_s": 0.0, "device_busy_share": 0.8, "kernel_s": 1.6e-3,
        "kernel_launches": 2, "idle_s": 0.4e-3, "top_kernels": [], "device": d,
    }  # fmt: skip
    text = profile_table("toy", profile)
    assert "of which between two steps: 1.0 ms per step" in text
    assert "gap of 2000 us after adamw (stream 7) before gemm (stream 7), between two steps" in text
    assert "gap of 300 us after gemm (stream 7) before adamw (stream 7), 0.4 ms into step 1 of 1.0 ms" in text
    assert "before adamw (stream 9), 0.5 ms into step 2 of 1.0 ms" in text
    # without spans (profiles from before the marks, other tools' kernels): no step fields, no between-steps line
    plain = device_gaps([k[:3] for k in kernels], steps=2, top=1)
    assert "between_steps_ms_per_step" not in plain
    assert plain["largest_gaps"] == [{"us": 2000, "after": "adamw", "before": "gemm"}]


def test_foreach_kernels_keep_the_name_of_their_operation():
    """Torch's foreach kernels share a long templated prefix: shown without its namespaces and parameter list, two
    of them (a scalar multiply and a lerp) stay apart within the shown width; other names pass through."""
    from harness.ladder.profile import short_name

    ns = "at::native::(anonymous namespace)::"
    mul = (
        f"void {ns}multi_tensor_apply_kernel<{ns}TensorListMetadata<2>, {ns}BinaryOpScalarFunctor<c10::BFloat16, 2, 1,"
        f" 1>, std::multiplies<float>, float>({ns}TensorListMetadata<2>, {ns}BinaryOpScalarFunctor<c10::BFloat16, 2, 1,"
        " 1>, std::multiplies<float>, float)"
    )
    lerp = mul.replace("BinaryOpScalarFunctor", "LerpFunctor").replace("std::multiplies<float>", "LerpOp<float>")
    assert (
        short_name(mul)
        == (
            "multi_tensor_apply_kernel<TensorListMetadata<2>, BinaryOpScalarFunctor<c10::BFloat16, 2, 1, 1>, "
            "std::multiplies<float>, float>"
        )[:120]
    )
    assert short_name(mul) != short_name(lerp) and "LerpFunctor" in short_name(lerp)
    assert short_name(mul)[:120] != mul[:120]  # the old cut kept only the shared prefix
    assert short_name("triton_red_fused_abs_gelu_max_mul_view_28") == "triton_red_fused_abs_gelu_max_mul_view_28"


def test_kernels_add_up_by_kind():
    """Kernel names as the H200 profiles record them fall into their kinds, so that an optimizer spread over many
    inductor foreach kernels adds up in one line; the table prints the kinds after the top kernels."""
    from harness.ladder.profile import kernel_kind, profile_table

    names = {
        "nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN": "GEMM",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0": (
            "attention"
        ),
        "triton_for_fused_15": "optimizer and other foreach",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::Ten": (
            "optimizer and other foreach"
        ),
        "triton_poi_fused_gelu_view_2": "inductor pointwise",
        "triton_red_fused_native_layer_norm_0": "inductor reductions",
        "void at::native::vectorized_elementwise_kernel<2, at::native::FillFunctor<long>, std::array<char*, 1ul> >": (
            "copies, fills and indexing"
        ),
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "communication",
        "something new": "other",
    }
    assert {name: kernel_kind(name) for name in names} == names
    profile = {
        "wall_s": 1e-3, "steps": 1, "data_wait_s": 0.0, "device_busy_share": None, "kernel_s": 0.0,
        "kernel_launches": 0, "idle_s": None, "top_kernels": [],
        "kernel_kinds": [{"kind": "optimizer and other foreach", "calls_per_step": 80, "ms_per_step": 13.9}],
    }  # fmt: skip
    lines = profile_table("toy", profile).splitlines()
    assert lines[-1].split() == ["optimizer", "and", "other", "foreach", "80", "13.90"]
    assert lines[-3].startswith("kernels by kind")


def test_annotations_are_told_from_kernels_whose_names_hold_a_lambdas_hash():
    """The device-side ranges of record_function and optimizer steps are left out of the kernels; a kernel named
    after a lambda ("...{lambda(float)#1}...") is a kernel. Dropping those hid a 15 ms multiply in the Pi0.5
    step's clipping as an idle gap (docs/ladders.md)."""
    from harness.ladder.profile import STEP_MARK, is_annotation

    assert is_annotation("Optimizer.step#AdamW.step") and is_annotation(f"{STEP_MARK}3")
    assert is_annotation("ProfilerStep#2") and is_annotation("my.block#forward")
    lambda_kernel = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
        "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, "
        "at::native::(anonymous namespace)::mul_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, ...)"
    )
    assert not is_annotation(lambda_kernel)
    assert not is_annotation("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN")


def test_kernel_summary_lists_the_top_kernels_by_time():
    """`top` kernels, the costliest first, per step; the kinds still add up every kernel."""
    from types import SimpleNamespace

    from harness.ladder.profile import kernel_summary

    def event(name, start_us, ms):
        return SimpleNamespace(
            device_type=torch.autograd.DeviceType.CUDA,
            name=name,
            device_time_total=1e3 * ms,
            time_range=SimpleNamespace(start=start_us, end=start_us + 1e3 * ms),
            device_resource_id=7,
        )

    times = {"triton_poi_fused_a": 1.0, "triton_poi_fused_b": 3.0, "nvjet_c": 2.0, "triton_red_fused_d": 0.5}
    events, start = [], 0.0
    for _ in range(2):  # two steps
        for name, ms in times.items():
            events.append(event(name, start, ms))
            start += 1e3 * ms + 5
    prof = SimpleNamespace(events=lambda: events)
    summary = kernel_summary(prof, steps=2, wall_s=0.01, on_gpu=False, top=2)
    assert [(k["name"], k["ms_per_step"]) for k in summary["top_kernels"]] == [
        ("triton_poi_fused_b", pytest.approx(3.0)),
        ("nvjet_c", pytest.approx(2.0)),
    ]
    assert summary["kernel_launches"] == 4 and summary["kernel_s"] == pytest.approx(6.5e-3)
    kinds = {k["kind"]: k["ms_per_step"] for k in summary["kernel_kinds"]}
    assert kinds == {"inductor pointwise": pytest.approx(4.0), "GEMM": 2.0, "inductor reductions": 0.5}
