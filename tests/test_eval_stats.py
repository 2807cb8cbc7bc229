"""Wilson intervals and success-rate entries (the numbers gates compare)."""

import pytest

from harness.stats.rates import rate_summary, wilson_interval


@pytest.mark.parametrize(
    "k, n, low, high", [(5, 10, 0.2366, 0.7634), (0, 10, 0.0, 0.2775), (49, 50, 0.8950, 0.9965), (10, 10, 0.7225, 1.0)]
)
def test_wilson_interval_matches_published_values(k, n, low, high):
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=1e-4) and hi == pytest.approx(high, abs=1e-4)


def test_wilson_edges_and_errors():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(0, 5)[0] == 0.0 and wilson_interval(5, 5)[1] == 1.0
    narrow, wide = wilson_interval(25, 50, 0.8), wilson_interval(25, 50, 0.99)
    assert wide[0] < narrow[0] < 0.5 < narrow[1] < wide[1]
    for bad in ((6, 5), (-1, 5)):
        with pytest.raises(ValueError):
            wilson_interval(*bad)


def test_rate_summary_entry():
    entry = rate_summary(3, 4)
    assert entry["successes"] == 3 and entry["trials"] == 4 and entry["rate"] == 0.75
    assert entry["wilson_low"] < 0.75 < entry["wilson_high"]
    assert rate_summary(0, 0)["rate"] is None


def test_eval_throughput_leaves_the_warm_up_call_out_of_the_latency_figures():
    from types import SimpleNamespace

    from harness.eval.runner import throughput

    runner = SimpleNamespace(
        n_workers=2, policy_calls=4, batch_sizes=[2, 2, 1, 2], policy_s=1.0, crashes=0, host_threads=1, cluster=None
    )
    latencies = [(2, 5.0), (2, 0.10), (1, 0.06), (2, 0.12)]  # 5 s: CUDA init on call 1
    records = [{"env_steps": 30, "sim_s": 3.0}, {"env_steps": 20, "sim_s": 2.0}]
    tp = throughput(records, 10.0, runner, latencies)
    assert tp["env_steps_per_s"] == 5.0 and tp["sim_steps_per_s_per_worker"] == 10.0
    assert tp["policy_host_threads"] == 1
    lat = tp["policy_latency_s"]
    assert lat["first_call"] == 5.0 and lat["calls"] == 3 and lat["warmup_calls_excluded"] == 1
    assert lat["median"] == 0.10 and lat["max"] == 0.12
    assert tp["policy_latency_per_chunk_s"] == pytest.approx(0.28 / 5)
    assert tp["policy_latency_by_batch_size"]["2"]["median_s"] == pytest.approx(0.11)
    assert tp["policy_latency_by_batch_size"]["1"]["calls"] == 1
