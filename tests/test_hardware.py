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
        "H200",
        989e12,
        1979e12,
    )
    assert h200.capabilities == {"fp8", "flex-backward", "compile"}
    assert get_target("cpu").peak_bf16_flops is None
    assert get_target("cpu").capabilities == {"compile"}
    for target in TARGETS.values():
        assert target.capabilities <= hardware.KNOWN_CAPABILITIES
        assert target.peak_source


def test_get_target_unknown_lists_known():
    with pytest.raises(ValueError, match=r"unknown target 'a800'; known targets: cpu, h200, cuda"):
        get_target("a800")


def test_device_name_matching():
    assert hardware._match_device_name("cuda", "NVIDIA H200").name == "h200"
    assert hardware._match_device_name("cuda", "NVIDIA A800-SXM4-80GB").name == "cuda"


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
