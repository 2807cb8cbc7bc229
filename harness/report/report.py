"""Tables of results (tabulate) and the markdown report with its figures (`vlabench report`)."""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from models import get_family
from models.schema import SchemaError
from models.workload import Workload

from .. import kinds
from ..judge import compare
from ..judge.compare import floor_text, mfu_text, peak_text, rate_text, speedup_text
from ..ladder.floor import attach_floors
from ..outputs import file_name
from ..results import host_summary
from .figures import hardware_bars, loss_curves, rung_bars, waterfall


def _num(value, fmt: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, fmt)


def _parity(p: dict | None) -> str:
    if not p:
        return "-"
    if p.get("max_rel_diff") is None:
        return "FAIL (no comparable steps)"
    verdict, op = ("pass", "<=") if p["pass"] else ("FAIL", ">")
    return f"{verdict} {p['max_rel_diff']:.1e} {op} {p['tolerance']:.0e}"


LADDER_HEADERS = (
    "rung",
    "status",
    "samples/s",
    "vs baseline",
    "vs previous",
    "peak GiB",
    "MFU",
    "compile s",
    "loss parity",
    "note",
)


def floor_note(rung: dict, result: dict, knobs) -> str | None:
    """The rung's share of the kernel floor of the precision it trains in (`knobs`: the family's reading of its
    options)."""
    share = floor_text(result, rung, knobs)
    return None if share is None else f"{share} of the kernel floor"


RESERVED_NOTE = 1.25  # a rung whose peak reserved memory exceeds its allocated peak by this factor notes it


def _graph_pool_unrecorded(rung: dict, knobs) -> bool:
    """A rung replaying CUDA graphs (the family says so from its options), from a result written before peak
    reserved memory was recorded: its allocated peak leaves out the graph's pool (reserved, not allocated, once
    captured), so it reads too low."""
    return knobs.cuda_graphs and "peak_reserved_gib" not in rung


def plan_note(plan: dict) -> str:
    """What a planned rung recomputed on its card (harness/ladder/memory_plan.py), in a few words."""
    if plan.get("fits") is False:
        return f"no recompute plan fits {plan['budget_gib']:.0f} GiB"
    if plan.get("micro_batches"):
        chosen = f"{plan['micro_batches']} micro-batches"
    else:
        chosen = "recompute " + ("as written" if plan["as_written"] else "+".join(plan["groups"]) or "nothing")
    return f"{chosen} for {plan['budget_gib']:.0f} GiB (predicted peak {plan['predicted_peak_gib']:.1f})"


def _knobs(family, rung: dict, notes: list[str]):
    """The family's reading of the rung's options; an option this version no longer has (a result from older
    code) is named in `notes` and the remarks that depend on the options read the family's defaults."""
    try:
        return family.knobs(rung["options"])
    except SchemaError as e:
        notes.append(f"options no longer understood by this version ({e.key}: {e.got}); remarks read the defaults")
        return family.knobs({})


def _family_notes(family, prev: dict | None, rung: dict, workload) -> list[str]:
    """The family's analytic remarks on the rung; none where its options or the previous rung's are ones this
    version no longer has (_knobs has named them)."""
    try:
        return family.rung_notes(
            prev["options"] if prev else None, rung["options"], workload, rung.get("world_size") or 1
        )
    except SchemaError:
        return []


def rung_notes(result: dict) -> dict[str, list[str]]:
    """Per rung: substitutions made on the target, the peak-memory change against the previous ok rung
    (measured) and the model family's analytic remarks."""
    family = get_family(result["workload"]["model"])
    workload = Workload.from_record(result["workload"])
    notes, prev = {}, None
    for r in result["rungs"]:
        n = [f"{k} {v}" for k, v in (r.get("substituted") or {}).items()]
        if r.get("memory_plan"):
            n.append(plan_note(r["memory_plan"]))
        if r["status"] == "ok":
            knobs = _knobs(family, r, n)
            if (r.get("world_size") or 1) > 1 and r.get("exposed_comm_s") is not None:
                n.append(
                    f"{r['world_size']} processes: {r['samples_per_s_per_device']:.2f} samples/s each; all-reduce "
                    f"exposed {1000 * r['exposed_comm_s']:.0f} ms of the {1000 * r['step_time_s']:.0f} ms step "
                    f"(no_sync step {1000 * r['nosync_step_time_s']:.0f} ms)"
                )
            if r.get("bucket_lead_ms") and r.get("comm_tail_ms") is not None:
                n.append(
                    f"{len(r['bucket_sizes_mb'])} buckets of "
                    + "/".join(f"{mb:.0f}" for mb in r["bucket_sizes_mb"])
                    + " MB launched "
                    + "/".join(f"{ms:.0f}" for ms in r["bucket_lead_ms"])
                    + f" ms before backward's end; waited {r['comm_tail_ms']:.0f} ms after it"
                )
            if floor_note(r, result, knobs):
                n.append(floor_note(r, result, knobs))
            if r.get("data_wait_ms") is not None:
                kind = (r.get("loader") or {}).get("kind") or "torch"  # unset: the dataset default
                prepare = r.get("prepare_ms")
                n.append(
                    f"{kind} loader: waited {r['data_wait_ms']:.0f} ms for data ({r['data_wait_share']:.1%} of "
                    "the step)" + (f", host preprocessing {prepare:.0f} ms per batch" if prepare is not None else "")
                )
            if r.get("loss_parity_note"):
                n.append(r["loss_parity_note"])
            if _graph_pool_unrecorded(r, knobs):
                n.append("allocated peak misses the CUDA graph's memory pool (reserved memory not in this result)")
            elif prev is not None and prev.get("peak_memory_gib") is not None and r.get("peak_memory_gib") is not None:
                n.append(f"peak {r['peak_memory_gib'] - prev['peak_memory_gib']:+.1f} GiB vs previous")
            reserved, peak = r.get("peak_reserved_gib"), r.get("peak_memory_gib")
            if reserved is not None and peak is not None and reserved > RESERVED_NOTE * peak:
                # a CUDA graph's private pool is reserved, not allocated, once captured: the allocated peak misses it
                n.append(f"reserved {reserved:.1f} GiB (allocated peak {peak:.1f})")
            n += _family_notes(family, prev, r, workload)
            prev = r
        notes[r["name"]] = n
    return notes


LADDER_LEGEND = (
    "samples/s: the median, with (p10-p90) of one run's steps, or [95% interval over repeats] xN repeats; "
    "speedups with [their 95% interval over repeats]; (different runs): the two rungs were measured in "
    "different runs, a ratio no verdict rests on"
)


def samples_text(r: dict) -> str:
    if r.get("samples_per_s_interval"):
        return rate_text(r)
    return f"{r['samples_per_s']:.2f} ({r['samples_per_s_p10']:.2f}-{r['samples_per_s_p90']:.2f})"


def _speedup_cells(result: dict, r: dict, prev: dict | None) -> list[str]:
    """vs baseline and vs previous, as stored, with the intervals over repeats and the different-runs mark."""
    base = speedup_text(result, r["name"]) if r.get("speedup_vs_baseline") else "-"
    previous = speedup_text(result, r["name"], prev["name"]) if prev and r.get("speedup_vs_previous") else "-"
    return [base, previous]


def ladder_rows(result: dict) -> list[list[str]]:
    rows = []
    notes = rung_notes(result)
    prev = None
    for r in result["rungs"]:
        if r["status"] != "ok":
            rows.append([r["name"], r["status"], "", "", "", "", "", "", "", r.get("reason") or ""])
            continue
        speedups, prev = _speedup_cells(result, r, prev), r
        rows.append(
            [
                r["name"],
                "ok",
                samples_text(r),
                *speedups,
                peak_text(r),
                mfu_text(r),
                _num(r.get("compile_s"), ".1f"),
                _parity(r.get("loss_parity")),
                "; ".join(notes[r["name"]]),
            ]
        )
    return rows


def ladder_table(result: dict, fmt: str = "simple") -> str:
    t, w = result["target"], result["workload"]
    per = f" per process x {result['nproc']} processes (DDP)" if (result.get("nproc") or 1) > 1 else ""
    title = (
        f"{result['scenario']['name']} on {t['name']} ({t.get('device_name')}), {w['model_size']} model, "
        f"batch {w['batch_size']}{per}, {w['dtype']}"
    )
    totals = (result.get("floor") or {}).get("totals")
    if totals:
        title += "; kernel floor " + ", ".join(f"{p} {v['samples_per_s']:.1f} samples/s" for p, v in totals.items())
        if result["floor"].get("from"):
            title += f" (from {result['floor']['from']})"
    host = host_summary(result)
    if host:  # a rung that reads a dataset is fed by these cores, an eager one launched at this host's speed
        title += f"; host {host}"
    table = tabulate(ladder_rows(result), headers=LADDER_HEADERS, tablefmt=fmt, disable_numparse=True)
    return f"{title}\n{table}\n{LADDER_LEGEND}"


def provenance_line(path: str, result: dict) -> str:
    p = result["provenance"]
    return (
        f"From `{path}`: `{p['command']}` at {p['created_at']}, commit {str(p['git_sha'])[:12]}"
        f"{' (uncommitted changes)' if p.get('dirty') else ''}, torch {p['torch']}."
    )


def eval_workers(result: dict) -> int:
    return (result.get("throughput") or {}).get("workers") or 0


def eval_title(result: dict, workers: bool = True) -> str:
    t, pol, n = result["target"], result.get("policy") or {}, eval_workers(result)
    model = f", {pol['model_size']} model" if pol.get("model_size") else ""
    workers = f", {n} env worker{'s' if n != 1 else ''}" if workers and n else ""
    # A policy without a checkpoint (the scripted expert, noop) has nothing to say in parentheses.
    detail = f" ({pol.get('checkpoint')}{model}, {pol.get('dtype')})" if pol.get("checkpoint") else ""
    return f"{result['scenario']['name']} on {t['name']} ({t.get('device_name')}): policy {pol.get('name')}{detail}{workers}"


def success_table(result: dict, fmt: str = "simple", tasks: bool = True) -> str:
    """Per suite (and, with `tasks`, per task) of an evaluation: successes of trials, the rate, its 95% Wilson
    interval and the errored episodes (counted as failures)."""
    rows = [
        [
            key,
            f"{e['successes']}/{e['trials']}",
            _num(e.get("rate"), ".1%"),
            f"{e['wilson_low']:.1%}-{e['wilson_high']:.1%}" if e.get("wilson_low") is not None else "-",
            e.get("errors", 0),
        ]
        for key, e in (result.get("success_rate") or {}).items()
        if tasks or "/" not in key
    ]
    return tabulate(
        rows, headers=("suite/task", "successes", "rate", "95% Wilson", "errors"), tablefmt=fmt, disable_numparse=True
    )


EVAL_SPEED_HEADERS = (
    "workers",
    "episodes",
    "env steps",
    "wall s",
    "env steps/s",
    "sim steps/s per worker",
    "policy calls",
    "mean batch",
    "ms per call (p10-p90)",
    "ms per chunk",
    "first call s",
    "CPU % (p90)",
    "GPU % (p90)",
)


def _utilisation(tp: dict, key: str) -> str:
    """Mean busy share with its 90th percentile, '-' where it was not sampled (results before it was)."""
    u = (tp.get("utilisation") or {}).get(key)
    return f"{u['mean']:.0f} ({u['p90']:.0f})" if u else "-"


def eval_throughput_row(result: dict, tp: dict | None = None) -> list[str] | None:
    """An evaluation's speed (or one run's, `tp`, of an evaluation resumed over several): env steps/s of all
    workers together, one worker's simulator steps/s, the policy calls and their batch, and the policy latency
    per call (warm-up call left out) and per action chunk."""
    tp = tp if tp is not None else result.get("throughput") or {}
    if not tp.get("env_steps_per_s"):
        return None
    lat = tp.get("policy_latency_s") or {}
    return [
        tp["workers"],
        tp["episodes"],
        tp["env_steps"],
        _num(tp.get("wall_s"), ".1f"),
        _num(tp["env_steps_per_s"], ".1f"),
        _num(tp.get("sim_steps_per_s_per_worker"), ".1f"),
        tp["policy_calls"],
        _num(tp.get("batch_size_mean"), ".1f"),
        (
            f"{1000 * lat['median']:.0f} ({1000 * lat['p10']:.0f}-{1000 * lat['p90']:.0f})"
            if "p10" in lat
            else _num(lat.get("median"), ".0f", 1000)
        ),
        _num(tp.get("policy_latency_per_chunk_s"), ".1f", 1000),
        _num(lat.get("first_call"), ".2f"),
        _utilisation(tp, "cpu_percent"),
        _utilisation(tp, "gpu_percent"),
    ]


def eval_throughput_table(result: dict, fmt: str = "simple") -> str:
    row = eval_throughput_row(result)
    return tabulate([row], headers=EVAL_SPEED_HEADERS, tablefmt=fmt, disable_numparse=True) if row else ""


def eval_scaling_table(results: list[dict], fmt: str = "simple") -> str:
    """Evaluations of one policy on one target that differ in their number of env workers: one row each,
    by workers, with the suites' success beside the speed."""
    runs = sorted(results, key=eval_workers)
    rows = []
    for r in runs:
        suites = [
            f"{k} {e['successes']}/{e['trials']}" for k, e in (r.get("success_rate") or {}).items() if "/" not in k
        ]
        rows += [row + ["; ".join(suites)] for row in _eval_rows(r)]
    table = tabulate(rows, headers=EVAL_SPEED_HEADERS + ("success",), tablefmt=fmt, disable_numparse=True)
    return eval_title(runs[0], workers=False) + "\n" + table


def _eval_rows(result: dict) -> list[list[str]]:
    """One speed row, or for an evaluation resumed over several runs one per run and the whole suite's."""
    total = result.get("throughput_total") or {}
    if (total.get("parts") or 0) < 2:
        row = eval_throughput_row(result)
        return [row] if row else []
    runs = [*result.get("throughput_parts", []), result.get("throughput") or {}]
    rows = []
    for i, tp in enumerate(runs, 1):
        row = eval_throughput_row(result, tp)
        if row:
            rows.append([f"{row[0]} (run {i} of {len(runs)})", *row[1:]])
    workers = (result.get("throughput") or {}).get("workers")
    rows.append(
        [
            f"{workers} (all {total['parts']} runs)",
            total["episodes"],
            total["env_steps"],
            _num(total.get("wall_s"), ".1f"),
            _num(total.get("env_steps_per_s"), ".1f"),
        ]
        + ["-"] * (len(EVAL_SPEED_HEADERS) - 5)
    )
    return rows


def eval_parts_line(result: dict) -> str | None:
    """The whole suite's speed when it ran in several parts (--resume); the throughput row is the last part's."""
    total = result.get("throughput_total") or {}
    if (total.get("parts") or 0) < 2:
        return None
    return (
        f"all {total['parts']} runs together (--resume): {total['episodes']} episodes, {total['env_steps']} env "
        f"steps in {_num(total.get('wall_s'), '.1f')} s = {_num(total.get('env_steps_per_s'), '.1f')} env steps/s"
    )


def eval_table(result: dict, fmt: str = "simple", tasks: bool = True) -> str:
    """Title, success rates and throughput of an evaluation (with the whole suite's over its runs)."""
    speed = eval_throughput_table(result, fmt)
    parts = eval_parts_line(result)
    lines = [eval_title(result), success_table(result, fmt, tasks)] + ([speed] if speed else [])
    return "\n".join(lines + ([parts] if parts else []))


def _passes(attention: dict) -> str:
    """' fwd+bwd' or ' fwd' after an attention call's name; nothing for a floor recorded before it said which."""
    if "backward" not in attention:
        return ""
    return " fwd+bwd" if attention["backward"] else " fwd"


def floor_table(result: dict, fmt: str = "simple", top: int = 12) -> str:
    """The kernel floor: totals per precision, then the operations that take the most of it."""
    floor, w, t = result["floor"], result["workload"], result["target"]
    head = (
        f"kernel floor of {result['scenario']['name']} on {t['name']} ({t.get('device_name')}), "
        f"{w['model_size']} model, batch {w['batch_size']}"
    )
    totals = [
        [
            p,
            f"{1e3 * v['gemm_s']:.1f}",
            f"{1e3 * v['attention_s']:.1f}",
            f"{1e3 * v['step_s']:.1f}",
            f"{v['samples_per_s']:.2f}",
        ]
        for p, v in floor["totals"].items()
    ]
    ops = [
        (g["name"] + (" (fp8)" if g["fp8"] else ""), g["count"], g["s"])
        for g in floor["gemms"]
        if g["precision"] == floor["dtype"] or g["fp8"]
    ]
    ops += [(f"{a['name']}{_passes(a)} ({a['best']})", a["count"], a["s"]) for a in floor["attention"]]
    ops.sort(key=lambda o: -o[1] * o[2])
    rows = [[name, count, f"{1e3 * s:.3f}", f"{1e3 * s * count:.1f}"] for name, count, s in ops[:top]]
    return "\n".join(
        [
            head,
            tabulate(
                totals,
                headers=("precision", "GEMMs ms", "attention ms", "step ms", "samples/s"),
                tablefmt=fmt,
                disable_numparse=True,
            ),
            "",
            tabulate(
                rows, headers=("operation", "per step", "ms each", "ms per step"), tablefmt=fmt, disable_numparse=True
            ),
        ]
    )


def result_table(result: dict, fmt: str = "simple", tasks: bool = True) -> str:
    """The table of one result: the ladder table, the cost table of a recompute sweep, or an evaluation's
    success rates (per task unless `tasks` is off) and throughput."""
    return kinds.kind_of(result).table(result, fmt, tasks)  # each kind's table (harness/kinds)


def figure_stem(path: str, result: dict) -> str:
    """File-name stem of a result's figures: its file name and target (two results may share a scenario)."""
    stem = Path(path).stem
    return stem if stem.endswith(result["target"]["name"]) else f"{stem}-{result['target']['name']}"


def write_report(results: list[tuple[str, dict]], out_dir, figures: list | None, command: str) -> Path:
    """report.md in `out_dir` with every result's table, its waterfall and per-rung figures, and the
    per-hardware comparison (with verdicts when published `figures` are given) and its bar chart."""
    for path, result in results:  # the figures' file names hold these names: plain names only
        file_name(result["scenario"]["name"], path, "scenario.name")
        file_name(result["target"]["name"], path, "target.name")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# vlabench report", "", f"Generated by `{command}`.", ""]
    results = attach_floors(results)  # a ladder shows its share of a floor measured apart
    for path, result in results:
        t = result["target"]
        lines += [
            f"## {result['scenario']['name']} on {t['name']} ({t.get('device_name')})",
            "",
            provenance_line(path, result),
            "",
            "```",
            result_table(result),
            "```",
            "",
        ]
        if compare.is_ladder(result) and any(r["status"] == "ok" for r in result["rungs"]):
            stem = figure_stem(path, result)
            waterfall(result, out / f"{stem}-waterfall.png", figures or [])
            rung_bars(result, out / f"{stem}-rungs.png")
            lines += [
                f"![speedup waterfall]({stem}-waterfall.png)",
                "",
                f"![samples/s and peak memory per rung]({stem}-rungs.png)",
                "",
            ]
        if kinds.kind_of(result).trained_runs(result) is not None:  # a training run or a train-ladder
            stem = figure_stem(path, result)
            loss_curves(result, out / f"{stem}-loss.png")
            lines += [f"![training loss per step]({stem}-loss.png)", ""]
    grouped = compare.columns(results)
    if grouped:
        lines += ["## Per-hardware comparison", "", compare.render(results, figures, "github"), ""]
        for scenario, cols in grouped.items():
            hardware_bars(scenario, cols, out / f"{scenario}-hardware.png")
            lines += [f"![per-hardware speedups of {scenario}]({scenario}-hardware.png)", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return report
