"""The table `vlabench show` prints for a training result (kind "train")."""

from __future__ import annotations

from tabulate import tabulate


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.2f} h"


def train_table(result: dict, fmt: str = "simple") -> str:
    """One row for the trained rung: steps, smoothed final loss, samples/s, wall time, the last checkpoint;
    then the recipe, the data and what differs from openpi's recipe."""
    t = result.get("train") or {}
    w = result.get("workload") or {}
    sps = t.get("samples_per_s")
    last = (t.get("checkpoints") or [{}])[-1].get("path", "-")
    row = [
        t.get("rung", "-"),
        t.get("model_size", "-"),
        f"{t.get('steps_done', 0)}/{t.get('steps_planned', '-')}",
        "-" if t.get("final_loss") is None else f"{t['final_loss']:.4f} (last {t.get('smoothing_window')})",
        "-" if sps is None else f"{sps:.1f}",
        duration(t.get("wall_s")),
        last,
    ]
    headers = ["rung", "size", "steps", "final loss (smoothed)", "samples/s", "wall time", "last checkpoint"]
    recipe = t.get("recipe") or {}
    lines = [
        f"{result['scenario']['name']} on {result['target']['name']} ({result['target'].get('device_name')}): "
        f"training, batch {t.get('batch_per_step', w.get('batch_size'))}"
        + (f" ({t['grad_accum']} micro-batches of {w.get('batch_size')})" if t.get("grad_accum", 1) > 1 else "")
        + f", {w.get('dtype')}",
        tabulate([row], headers=headers, tablefmt=fmt),
        f"recipe: AdamW {tuple(recipe.get('betas') or ())}, eps {recipe.get('eps')}, weight decay "
        f"{recipe.get('weight_decay')}, clip {recipe.get('clip_norm')}, lr {recipe.get('peak_lr')} after "
        f"{recipe.get('warmup_steps')} warm-up steps, cosine to {recipe.get('decay_lr')} at {recipe.get('decay_steps')}, "
        f"EMA {recipe.get('ema_decay') or 'off'}; init {t.get('init')}",
    ]
    if t.get("recipe_changed"):
        changed = ", ".join(f"{k} {v[1]} (openpi {v[0]})" for k, v in t["recipe_changed"].items())
        lines.append(f"differs from openpi's pi05_libero: {changed}")
    if t.get("test_train_sabotage"):
        lines.append(f"TEST SABOTAGE: {t['test_train_sabotage']['mode']} (not a measurement)")
    return "\n".join(lines)
