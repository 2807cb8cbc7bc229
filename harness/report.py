"""Human-readable tables of results (tabulate)."""
from __future__ import annotations

from tabulate import tabulate


def _num(value, fmt: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, fmt)


def _parity(p: dict | None) -> str:
    if not p:
        return "-"
    if p.get("max_rel_diff") is None:
        return "FAIL (no comparable steps)"
    verdict, op = ("pass", "<=") if p["pass"] else ("FAIL", ">")
    return f"{verdict} {p['max_rel_diff']:.1e} {op} {p['tolerance']:.0e}"


LADDER_HEADERS = ("rung", "status", "samples/s (p10-p90)", "vs baseline", "vs previous", "peak GiB",
                  "MFU", "compile s", "loss parity", "note")


def rung_notes(result: dict) -> dict[str, list[str]]:
    """Per rung: substitutions made on the target, the peak-memory change against the previous ok rung
    (measured) and the model family's analytic remarks."""
    from models import get_family

    family = get_family(result["workload"]["model"])
    notes, prev = {}, None
    for r in result["rungs"]:
        n = [f"{k} {v}" for k, v in (r.get("substituted") or {}).items()]
        if r["status"] == "ok":
            if prev is not None and prev.get("peak_memory_gib") is not None and r.get("peak_memory_gib") is not None:
                n.append(f"peak {r['peak_memory_gib'] - prev['peak_memory_gib']:+.1f} GiB vs previous")
            n += family.rung_notes(prev["options"] if prev else None, r["options"], result["workload"]) \
                if hasattr(family, "rung_notes") else []
            prev = r
        notes[r["name"]] = n
    return notes


def ladder_rows(result: dict) -> list[list[str]]:
    rows = []
    notes = rung_notes(result)
    for r in result["rungs"]:
        if r["status"] != "ok":
            rows.append([r["name"], r["status"], "", "", "", "", "", "", "", r.get("reason") or ""])
            continue
        rows.append([
            r["name"], "ok",
            f"{r['samples_per_s']:.2f} ({r['samples_per_s_p10']:.2f}-{r['samples_per_s_p90']:.2f})",
            _num(r.get("speedup_vs_baseline"), ".2f") + ("x" if r.get("speedup_vs_baseline") else ""),
            _num(r.get("speedup_vs_previous"), ".2f") + ("x" if r.get("speedup_vs_previous") else ""),
            _num(r.get("peak_memory_gib"), ".1f"),
            _num(r.get("mfu"), ".1f", 100) + ("%" if r.get("mfu") is not None else ""),
            _num(r.get("compile_s"), ".1f"),
            _parity(r.get("loss_parity")),
            "; ".join(notes[r["name"]]),
        ])
    return rows


def ladder_table(result: dict, fmt: str = "simple") -> str:
    t, w = result["target"], result["workload"]
    title = (f"{result['scenario']['name']} on {t['name']} ({t.get('device_name')}), {w['model_size']} model, "
             f"batch {w['batch_size']}, {w['dtype']}")
    return title + "\n" + tabulate(ladder_rows(result), headers=LADDER_HEADERS, tablefmt=fmt, disable_numparse=True)
