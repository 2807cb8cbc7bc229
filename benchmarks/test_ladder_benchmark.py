"""Scenario rungs under pytest-benchmark: one benchmark per rung, one round per training step.

    pytest benchmarks/ --benchmark-autosave                                      # record
    pytest benchmarks/ --benchmark-compare --benchmark-compare-fail=median:5%    # gate against the last record

Each rung is built in this process with the same code as `vlabench run` (harness/ladder/rung.py: options,
batches, optimizer), warmed up for the scenario's warm-up steps and timed for its timed steps on the
target the scenario gives the machine (the cpu target's tiny model on a CPU). Rungs the target cannot
run are skipped with the reason. `vlabench gate` is the noise-aware gate; this is the pytest-native one.
"""

import time

import pytest
import torch

from harness.ladder.rung import (
    build,
    configured_test_slowdown,
    seed_step,
    slow_down_for_test,
)
from harness.ladder.runner import unsupported_reason, with_substitutes
from harness.machine.hardware import capabilities, detect_target, get_target
from harness.scenario import load_scenario
from harness.spec import scenario_spec


@pytest.fixture(scope="module")
def scenario(request):
    return load_scenario(request.config.getoption("--vlabench-scenario"))


@pytest.fixture(scope="module")
def target(request, scenario):
    name = request.config.getoption("--vlabench-target")
    target = get_target(name) if name else detect_target()
    if target.name not in scenario.targets:
        pytest.skip(f"{scenario.name} has no entry for target {target.name}")
    return target


def test_rung(benchmark, scenario, target, rung_name):
    rung = next(r for r in scenario.ladder if r.name == rung_name)
    caps = capabilities(target)
    rung, substituted = with_substitutes(scenario, target, rung, caps)
    reason = unsupported_reason(scenario, target, rung, caps)
    if reason:
        pytest.skip(reason)
    spec = scenario_spec(scenario, target, rung)
    workload = spec.workload
    warmup, timed = workload.warmup_steps, workload.timed_steps
    torch._dynamo.reset()  # each rung compiles afresh, as in its own process under `vlabench run`
    setup = build(spec, warmup + timed)
    device = setup.device
    slowdown = configured_test_slowdown()
    step = iter(range(warmup + timed))

    def one_step():
        i = next(step)
        seed_step(workload.seed, i)
        started = time.perf_counter()
        setup.step(setup.feed.fetch(i)[0])
        slow_down_for_test(device, started, slowdown)
        device.synchronize()

    benchmark.extra_info.update(
        scenario=scenario.name,
        target=target.name,
        batch_size=workload.batch_size,
        options=rung.cumulative,
        substituted=substituted,
    )
    benchmark.pedantic(one_step, rounds=timed, warmup_rounds=warmup, iterations=1)
    benchmark.extra_info["samples_per_s"] = workload.batch_size / benchmark.stats.stats.median
