import importlib.util
import time

import pytest
import torch

from harness.machine import hardware
from harness.machine.hardware import TARGETS, capabilities, detect_target, get_device, get_target

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU path")


def test_targets():
    h200 = get_target("h200")
    assert (h200.backend, h200.device_match, h200.peak_bf16_flops, h200.peak_fp8_flops) == (
        "cuda",
        ("H200",),
        989e12,
        1979e12,
    )
    assert h200.capabilities == {"fp8", "flex-backward", "compile"}
    assert get_target("cpu").peak_bf16_flops is None
    assert get_target("cpu").capabilities == {"compile"}
    for target in TARGETS.values():
        assert target.capabilities <= hardware.KNOWN_CAPABILITIES
        assert target.peak_source


def test_the_cards_users_have():
    """H100 SXM: the H200's tensor-core peaks (the same chip's datasheet figures) with 80 GB; A100 80GB: 312 TFLOP/s
    bf16 dense and no FP8, so its peak for FP8 is absent and FP8 is not among its capabilities."""
    h100, a100 = get_target("h100"), get_target("a100")
    assert (h100.peak_bf16_flops, h100.peak_fp8_flops, h100.memory_gib) == (989e12, 1979e12, 80.0)
    assert h100.capabilities == {"fp8", "flex-backward", "compile"}
    assert (a100.peak_bf16_flops, a100.peak_fp8_flops, a100.memory_gib) == (312e12, None, 80.0)
    assert "fp8" not in a100.capabilities and "fp8" not in capabilities(a100)
    assert "multi-process" in capabilities(h100, nproc=2) and "multi-process" not in capabilities(h100)


def test_get_target_unknown_lists_known():
    with pytest.raises(ValueError, match=r"unknown target 'a800'; known targets: cpu, h200, h100, a100, cuda"):
        get_target("a800")


@pytest.mark.parametrize(
    "device_name, target",
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA A100 80GB PCIe", "a100"),
        # other memory sizes and form factors have other peaks or memory: the generic target, no borrowed figures
        ("NVIDIA A100-SXM4-40GB", "cuda"),
        ("NVIDIA H100 PCIe", "cuda"),
        ("NVIDIA H100 NVL", "cuda"),
        ("NVIDIA A800-SXM4-80GB", "cuda"),
    ],
)
def test_device_name_matching(device_name, target):
    assert hardware._match_device_name("cuda", device_name).name == target


def test_generic_cuda_decides_fp8_from_the_compute_capability(monkeypatch):
    """The generic target has FP8 from sm_89 on (Ada, Hopper); a named target keeps its table's capabilities."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for cc, fp8 in (((8, 0), False), ((8, 6), False), ((8, 9), True), ((9, 0), True)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0, cc=cc: cc)
        assert ("fp8" in capabilities(get_target("cuda"))) is fp8
        assert "fp8" not in capabilities(get_target("a100"))
        assert "fp8" in capabilities(get_target("h100"))


@cpu_only
def test_detects_cpu():
    target = detect_target()
    assert target.name == "cpu"
    assert capabilities(target) == {"compile"}


def test_cpu_device_timing_and_memory():
    device = get_device("cpu")
    assert device.torch_device == torch.device("cpu")
    assert device.device_count() == 1 and device.device_name()
    start, end = device.event(), device.event()
    outer = time.perf_counter()
    start.record()
    time.sleep(0.05)
    end.record()
    device.synchronize()
    outer = time.perf_counter() - outer
    # in seconds, and inside the wall time around the two records: no fixed upper bound, which a busy machine
    # (a sleep that overslept) could pass; milliseconds for seconds would be 1000x either bound
    assert 0.05 <= device.elapsed_s(start, end) <= outer

    device.reset_peak_memory()
    before = device.peak_memory_bytes()
    x = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
    after = device.peak_memory_bytes()
    assert after - before > 32 * 2**20
    del x


@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None, reason="torch_npu is installed")
def test_npu_without_torch_npu_is_a_clear_error():
    with pytest.raises(RuntimeError, match=r"target npu needs torch_npu; install vlabench\[npu\]"):
        get_device("npu")
    with pytest.raises(RuntimeError, match=r"target ascend-a2 needs torch_npu"):
        get_device("npu", target_name="ascend-a2")


@cpu_only
def test_cuda_without_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="target h200 needs a CUDA GPU"):
        get_device("cuda", target_name="h200")


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        hardware.Device("tpu")


def test_one_backend_table_serves_targets_devices_process_groups_and_probes():
    from harness.ladder import distributed
    from harness.machine import probe
    from harness.machine.backends import BACKENDS, get_backend

    assert {t.backend for t in TARGETS.values()} <= set(BACKENDS)
    assert distributed.PROCESS_GROUP_BACKEND == {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}
    assert hardware.ALLOCATOR_ENV == {"npu": {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}}
    cpu = get_backend("cpu")
    assert not cpu.accelerator and cpu.torch_api() is None and hardware.Device("cpu").info is cpu
    assert get_backend("cuda").torch_api() is torch.cuda
    record = probe.MachineProbe(hardware.Device("cpu")).record()
    assert record["kernel"] == f"fp32 matmul {cpu.probe_size}x{cpu.probe_size}x{cpu.probe_size}"
    with pytest.raises(ValueError, match="unknown backend 'tpu'; expected cpu, cuda, npu"):
        get_backend("tpu")
