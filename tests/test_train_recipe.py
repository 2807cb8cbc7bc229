"""openpi's recipe as `vlabench train` applies it: the schedule, the EMA, the optimizer check, the convergence
check's arithmetic and the wall-clock prediction. Quick, no training."""

import math

import pytest
import torch

from harness.results import load_result
from harness.train.convergence import check_convergence, smoothed_loss, window_for
from harness.train.predict import DEFAULT_RESULT, predict, prediction_table
from harness.train.recipe import OPENPI_PI05_LIBERO, Ema, Recipe, lr_at, optimizer_mismatch
from models.workload import Workload


def test_the_defaults_are_openpis_pi05_libero():
    r = OPENPI_PI05_LIBERO
    assert (r.peak_lr, r.warmup_steps, r.decay_steps, r.decay_lr) == (5e-5, 10_000, 1_000_000, 5e-5)
    assert (r.betas, r.eps, r.weight_decay, r.clip_norm, r.ema_decay) == ((0.9, 0.95), 1e-8, 1e-10, 1.0, 0.999)
    assert (r.batch_size, r.steps) == (256, 30_000)
    assert r.changed() == {}
    assert Recipe(peak_lr=1e-3).changed() == {"peak_lr": [5e-5, 1e-3]}


def optax_warmup_cosine(step: int, init: float, peak: float, warmup: int, decay: int, end: float) -> float:
    """optax.warmup_cosine_decay_schedule written from its definition (linear, then cosine_decay_schedule with
    alpha = end / peak over decay - warmup steps)."""
    if step < warmup:
        return init + (peak - init) * step / warmup
    t = min(step - warmup, decay - warmup)
    cosine = 0.5 * (1 + math.cos(math.pi * t / (decay - warmup)))
    alpha = end / peak
    return peak * ((1 - alpha) * cosine + alpha)


@pytest.mark.parametrize("step", [0, 1, 50, 99, 100, 101, 500, 999, 1000, 5000])
def test_the_schedule_is_optaxs_warmup_cosine_decay_as_openpi_builds_it(step):
    r = Recipe(peak_lr=1e-3, warmup_steps=100, decay_steps=1000, decay_lr=1e-5)
    expected = optax_warmup_cosine(step, 1e-3 / 101, 1e-3, 100, 1000, 1e-5)
    assert lr_at(r, step) == pytest.approx(expected, rel=1e-12)


def test_openpis_pi05_libero_schedule_warms_up_then_holds_the_peak():
    r = OPENPI_PI05_LIBERO
    assert lr_at(r, 0) == pytest.approx(5e-5 / 10_001)
    assert lr_at(r, 10_000) == pytest.approx(5e-5)
    assert lr_at(r, 29_999) == pytest.approx(5e-5)  # decay_lr == peak_lr: the cosine has nothing to decay


def test_ema_follows_openpis_update_in_fp32():
    p = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    ema = Ema({"p": p}, decay=0.9)
    with torch.no_grad():
        p.fill_(2.0)
    ema.update()
    assert ema.tensors()["p"].dtype == torch.float32
    assert torch.allclose(ema.tensors()["p"], torch.full((4,), 0.9 * 1 + 0.1 * 2))
    ema.load({"p": torch.zeros(4)})
    assert ema.tensors()["p"].abs().sum() == 0


def test_the_pi05_familys_optimizer_is_the_recipes_adamw():
    from models import get_family

    family = get_family("pi05")
    opts = family.parse_options({})
    model = torch.nn.Linear(2, 2)
    assert (
        optimizer_mismatch(family.optimizer(model, opts, Workload(batch_size=1, lr=1e-4), "cpu"), OPENPI_PI05_LIBERO)
        is None
    )
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    assert "SGD" in optimizer_mismatch(sgd, OPENPI_PI05_LIBERO)


def test_smoothed_loss_and_the_convergence_verdict():
    assert window_for(300) == 30 and window_for(50) == 10 and window_for(4) == 4
    assert smoothed_loss([3.0, 2.0, 1.0], window=2) == 1.5
    assert smoothed_loss([1.0, None], window=2) is None
    reference = {"train": {"rung": "community", "losses": [1.0] * 100}}
    close = {"train": {"rung": "fp8", "losses": [1.0] * 90 + [1.05] * 10}}
    worse = {"train": {"rung": "broken", "losses": [1.0] * 90 + [1.5] * 10}}
    better = {"train": {"rung": "too-good", "losses": [1.0] * 90 + [0.5] * 10}}
    ok = check_convergence(close, reference)
    assert ok.passed and ok.rel_diff == pytest.approx(0.05) and ok.window == 10
    assert not check_convergence(worse, reference).passed
    assert not check_convergence(better, reference).passed  # both sides fail
    short = check_convergence({"train": {"losses": [1.0] * 50}}, reference)
    assert short.steps == 50 and "first 50 steps" in short.note


def test_prediction_is_the_runs_samples_over_each_rungs_measured_rate():
    result = load_result(DEFAULT_RESULT)
    predictions = {p.rung: p for p in predict(result, 30_000, 256)}
    rungs = {r["name"]: r for r in result["rungs"] if r["status"] == "ok"}
    assert set(predictions) == set(rungs)
    fp8 = predictions["fp8"]
    assert fp8.hours[1] == pytest.approx(30_000 * 256 / rungs["fp8"]["samples_per_s"] / 3600)
    assert fp8.hours[8] == pytest.approx(fp8.hours[1] / 8)  # linear scaling, stated as an assumption
    table = prediction_table(result, 30_000, 256)
    assert "7,680,000 samples" in table and "linear scaling (not measured)" in table
