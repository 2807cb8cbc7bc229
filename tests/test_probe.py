"""The machine probe: a fixed matmul on the rung's device, and on an accelerator the host's dispatch speed."""

import pytest
import torch

from harness.machine.hardware import get_device
from harness.machine.probe import HOST_OPS, MachineProbe, probe_rates


def test_cpu_probe_times_the_matmul_only():
    probe = MachineProbe(get_device("cpu"))
    for where in ("before", "step 1", "after"):
        assert probe.sample(where) > 0
    record = probe.record()
    assert record["kernel"] == "fp32 matmul 256x256x256" and record["where"] == ["before", "step 1", "after"]
    assert len(probe_rates(record)) == 3 and "host_times_s" not in record  # on a CPU the matmul is the host


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the host probe runs beside an accelerator's")
def test_accelerator_probe_also_times_the_host():
    probe = MachineProbe(get_device("cuda"))
    probe.sample("before")
    probe.sample("after")
    record = probe.record()
    assert record["host_kernel"] == f"{HOST_OPS} in-place CPU tensor adds"
    assert len(record["host_times_s"]) == 2 and all(t > 0 for t in record["host_times_s"])
