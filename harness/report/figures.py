"""Report figures (matplotlib, imported only here so `vlabench run` never needs it).

Each function writes one PNG and returns its path. PNGs carry no software/date metadata, so the same
results and matplotlib give the same bytes.
"""

from __future__ import annotations

from pathlib import Path

from .. import kinds
from ..judge.compare import Column, speedup
from ..judge.published import Figure

GAIN, LOSS, BASE, THEIRS = "#2b8a3e", "#c92a2a", "#868e96", "#1c1c1c"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, metadata={"Software": None}, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def _ok_rungs(result: dict) -> list[dict]:
    return [r for r in result["rungs"] if r["status"] == "ok"]


def _published_speedups(result: dict, figures: list[Figure]) -> list[tuple[str, Figure]]:
    """(rung, figure) for published speedups over this ladder's first rung."""
    first = result["rungs"][0]["name"] if result["rungs"] else None
    out = []
    for f in figures:
        ours = f.ours or {}
        if (
            f.metric == "speedup"
            and ours.get("scenario") == result["scenario"]["name"]
            and ours.get("from_rung") == first
        ):
            out.append((ours["to_rung"], f))
    return out


def waterfall(result: dict, path: Path, figures: list[Figure] = ()) -> Path:
    """Cumulative speedup over the baseline rung, each rung's bar floating from the previous rung's level
    (green: faster, red: slower); published end-point speedups as black diamonds."""
    plt = _pyplot()
    rungs = _ok_rungs(result)
    names = [r["name"] for r in rungs]
    levels = [speedup(result, n) or 0.0 for n in names]
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    prev = 0.0
    for i, level in enumerate(levels):
        colour = BASE if i == 0 else (GAIN if level >= prev else LOSS)
        ax.bar(i, level - prev, bottom=prev, color=colour, width=0.7)
        ax.text(i, max(level, prev) + 0.03, f"{level:.2f}x", ha="center", va="bottom", fontsize=8)
        if i:
            ax.plot([i - 1.35, i - 0.35], [prev, prev], color=BASE, linewidth=0.8)  # connector
        prev = level
    shown = set()
    for rung, f in _published_speedups(result, figures):
        if rung in names and (rung, f.point) not in shown:
            shown.add((rung, f.point))
            i = names.index(rung)
            ax.plot(i + 0.42, f.point, marker="D", color=THEIRS, markersize=4)
            ax.annotate(
                f"{f.label} {f.value_text()}",
                (i + 0.42, f.point),
                xytext=(5, 0),
                textcoords="offset points",
                fontsize=7,
                va="center",
                ha="left",
            )
    ax.set_xlim(-0.6, len(names) + (1.4 if shown else -0.4))  # room for the published labels on the right
    ax.set_xticks(range(len(names)), names, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("speedup over baseline rung")
    ax.set_ylim(0, max([*levels, *(f.point for _, f in _published_speedups(result, figures))], default=1) * 1.18)
    t, w = result["target"], result["workload"]
    ax.set_title(
        f"{result['scenario']['name']} on {t['name']} ({t.get('device_name')}), batch {w['batch_size']}", fontsize=9
    )
    ax.spines[["top", "right"]].set_visible(False)
    return _save(fig, path)


def rung_bars(result: dict, path: Path) -> Path:
    """samples/s (median, p10-p90 whiskers) and peak memory per rung, side by side."""
    plt = _pyplot()
    rungs = _ok_rungs(result)
    names = [r["name"] for r in rungs]
    x = range(len(names))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    sps = [r["samples_per_s"] for r in rungs]
    err = [
        [s - r["samples_per_s_p10"] for s, r in zip(sps, rungs)],
        [r["samples_per_s_p90"] - s for s, r in zip(sps, rungs)],
    ]
    ax1.bar(x, sps, yerr=err, capsize=2, color=GAIN)
    ax1.set_ylabel("samples/s (median, p10-p90)")
    mem = [r.get("peak_memory_gib") or 0.0 for r in rungs]
    ax2.bar(x, mem, color=BASE)
    ax2.set_ylabel(f"peak memory GiB ({rungs[0].get('peak_memory_kind', '') if rungs else ''})", fontsize=8)
    for ax in (ax1, ax2):
        ax.set_xticks(list(x), names, rotation=30, ha="right", fontsize=7)
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(f"{result['scenario']['name']} on {result['target']['name']}", fontsize=9)
    return _save(fig, path)


def _trained_runs(result: dict) -> list[tuple[str, dict]]:
    """(label, train block) of a `vlabench train` result or of each trained rung of a train-ladder."""
    return kinds.kind_of(result).trained_runs(result) or []  # harness/kinds: train.py, train_ladder.py


def _smoothed(losses: list, window: int) -> list[float]:
    """The trailing mean over `window` steps (fewer at the start); a missing loss ends the curve."""
    out, total = [], 0.0
    for i, value in enumerate(losses):
        if value is None:
            break
        total += value - (losses[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def loss_curves(result: dict, path: Path) -> Path:
    """The training loss per step of each trained run (a trailing mean over 2% of the steps), log scale."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for label, train in _trained_runs(result):
        losses = list(train.get("losses") or [])
        window = max(1, len(losses) // 50)
        ax.plot(range(1, len(_smoothed(losses, window)) + 1), _smoothed(losses, window), label=label, linewidth=1)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (trailing mean over 2% of the steps)", fontsize=8)
    ax.legend(fontsize=7)
    ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(f"{result['scenario']['name']} on {result['target']['name']}", fontsize=9)
    return _save(fig, path)


def hardware_bars(scenario: str, cols: list[Column], path: Path) -> Path:
    """Speedup over each target's own baseline rung, grouped by rung, one bar per target."""
    plt = _pyplot()
    names: list[str] = []
    for col in cols:
        names += [r["name"] for r in col.result["rungs"] if r["name"] not in names]
    width = 0.8 / max(len(cols), 1)
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    for j, col in enumerate(cols):
        values = [speedup(col.result, n) or 0.0 for n in names]
        ax.bar([i + (j - (len(cols) - 1) / 2) * width for i in range(len(names))], values, width=width, label=col.label)
    ax.axhline(1.0, color=BASE, linewidth=0.8)
    ax.set_xticks(range(len(names)), names, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("speedup over own baseline")
    ax.set_title(f"{scenario}: per-hardware speedups (0 = not run or not ok)", fontsize=9)
    ax.legend(fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return _save(fig, path)
