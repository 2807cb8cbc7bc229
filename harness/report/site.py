"""`vlabench site OUT/`: a static results site of the committed results, plain HTML and PNG files.

index.html is a matrix of scenarios x cards (targets), each cell linking to its scenario's page, and the goals per card
(harness/report/goals.py, as docs/hardware.md shows them). A scenario page
holds the per-card table and the published figures' verdicts per card (harness/judge/compare.py, as
`vlabench compare --per-card`), then per card each ladder result's waterfall (harness/report/figures.py), its
ladder table and each rung's history over the committed results of that scenario and card (results/<target>/ and
its subfolders: the baselines `vlabench record` replaced, under history/, and the runs under evidence/, e.g.
results/h200/evidence/repeats/: the commit and date each rung was measured at, and its samples/s).
trained.html holds the trained-policy success tables (train-ladder results) with their loss curves.

Every string from a result file is escaped. The site is written only under OUT: a new or empty directory, or a
previous site (its files, listed in OUT/.vlabench-site, are replaced), or with --force any directory.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from ..judge import compare
from ..judge.published import load_published
from ..outputs import check_out_dir
from .figures import loss_curves, waterfall
from .goals import HEADERS as GOALS_HEADERS
from .goals import INTRO as GOALS_INTRO
from .goals import goal_rows
from .hardware import failed_rows
from .readme import _results, _trained, every_ladder, repo_scenarios
from .report import figure_stem, provenance_line, result_table

MARKER = ".vlabench-site"  # a previous site: the files it wrote, one per line
FIGURES = "figures"
STYLE = (
    "body{font-family:sans-serif;margin:1.5em;max-width:110em}table{border-collapse:collapse;margin:.6em 0}"
    "th,td{border:1px solid #ccc;padding:2px 6px;font-size:13px;text-align:left}th{background:#f1f3f5}"
    "pre{font-size:12px;overflow-x:auto;background:#f8f9fa;padding:.5em}img{max-width:100%}"
)


@dataclass
class SiteData:
    results: list[tuple[str, dict]]  # results/<target>/*.json, floors attached
    trained: list[tuple[str, dict]]  # results/<target>/evidence/<run>/train-ladder.json
    ladders: list[tuple[str, dict]]  # every ladder result under results/<target>/ (history/, evidence/ too)
    figures: list  # the published figures
    scenarios: list = field(default_factory=list)  # scenarios/*.yaml, for the goals' failed rows


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def slug(text: str) -> str:
    """A file or anchor name from a scenario or card name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"


def html_table(headers: list, rows: list[list]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>\n" for row in rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>\n"


def page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{esc(title)}</title>\n'
        f'<style>{STYLE}</style>\n</head>\n<body>\n<nav><a href="index.html">vlabench results</a> | '
        f'<a href="trained.html">trained policies</a></nav>\n<h1>{esc(title)}</h1>\n{body}</body>\n</html>\n'
    )


def load_site_data(repo: Path) -> SiteData:
    """The committed results as `vlabench readme` reads them, and every ladder result under results/<target>/."""
    published = load_published(repo / "results" / "published")
    return SiteData(_results(repo), _trained(repo), every_ladder(repo), published, repo_scenarios(repo))


def _same_ladder(a: dict, b: dict) -> bool:
    """Two ladder results whose rungs compare: one scenario, card, model size, batch and number of processes."""
    wa, wb = a["workload"], b["workload"]
    return (
        a["scenario"]["name"] == b["scenario"]["name"]
        and a["target"]["name"] == b["target"]["name"]
        and (wa.get("model_size"), wa.get("batch_size")) == (wb.get("model_size"), wb.get("batch_size"))
        and compare.devices(a) == compare.devices(b)
    )


def rung_history(result: dict, ladders: list[tuple[str, dict]]) -> list[list[str]]:
    """Rows (rung, measured at, commit, samples/s, file): each ok rung of `result` as measured in every committed
    result of the same ladder, by date; one row per measurement (rungs carried from an earlier run are one)."""
    seen, rows = set(), []
    names = [r["name"] for r in result["rungs"]]
    for path, other in ladders:
        if not _same_ladder(result, other):
            continue
        for rec in other["rungs"]:
            if rec["status"] != "ok" or rec["name"] not in names:
                continue
            measured = rec.get("measured") or other["provenance"]
            key = (rec["name"], measured.get("created_at"), measured.get("git_sha"), round(rec["samples_per_s"], 3))
            if key not in seen:
                seen.add(key)
                sha = str(measured.get("git_sha") or "-")[:10]
                rows.append([rec["name"], measured.get("created_at") or "-", sha, compare.rate_text(rec), path])
    return sorted(rows, key=lambda r: (names.index(r[0]), r[1]))


def cards(grouped: dict[str, list[compare.Column]]) -> list[str]:
    return sorted({col.result["target"]["name"] for cols in grouped.values() for col in cols})


def _cell(scenario: str, card: str, cols: list[compare.Column]) -> str:
    """A matrix cell: each ladder of the scenario on the card, its ok rungs and its last rung's speedup."""
    mine = [c for c in cols if c.result["target"]["name"] == card]
    if not mine:
        return "<td>-</td>"
    parts = []
    for col in mine:
        ok = [r for r in col.result["rungs"] if r["status"] == "ok"]
        best = compare.speedup_text(col.result, ok[-1]["name"]).split(" ")[0] if ok else "-"
        parts.append(f"{esc(col.label)}: {len(ok)} rungs, last {esc(best)}")
    href = f"{slug(scenario)}.html#{slug(card)}"
    return f'<td><a href="{esc(href)}">' + "<br>".join(parts) + "</a></td>"


def index_page(data: SiteData) -> str:
    grouped = compare.columns(data.results)
    all_cards = cards(grouped)
    head = "<tr><th>scenario</th>" + "".join(f"<th>{esc(c)}</th>" for c in all_cards) + "</tr>"
    rows = "".join(
        f'<tr><th><a href="{esc(slug(s))}.html">{esc(s)}</a></th>' + "".join(_cell(s, c, cols) for c in all_cards)
        for s, cols in grouped.items()
    )
    trained = f'<p><a href="trained.html">Trained policies</a>: {len(data.trained)} train-ladder results.</p>'
    failed = failed_rows(data.ladders, data.scenarios)
    bars = [[*row[:-1], f"docs/{row[-1]}" if row[-1] else "-"] for row in goal_rows(data.results, data.figures, failed)]
    goals = f"<h2>Goals per card</h2>\n<p>{esc(GOALS_INTRO)}</p>\n{html_table(GOALS_HEADERS, bars)}"
    return page(
        "vlabench results",
        "<p>Scenarios (rows) measured on each card (columns): a cell links to the scenario's per-card table, "
        "its waterfalls and its rungs' history. Speedups are over each card's own first rung.</p>\n"
        f"<table>\n<thead>{head}</thead>\n<tbody>\n{rows}\n</tbody>\n</table>\n{trained}\n{goals}",
    )


def _ladder_section(col: compare.Column, data: SiteData, out: Path, written: list[str]) -> str:
    """One ladder result: its provenance, waterfall, ladder table and its rungs' history."""
    name = f"{FIGURES}/{slug(figure_stem(col.path, col.result))}-waterfall.png"
    parts = [f"<h3>{esc(col.label)}</h3>", f"<p>{esc(provenance_line(col.path, col.result))}</p>"]
    if any(r["status"] == "ok" for r in col.result["rungs"]):
        waterfall(col.result, out / name, data.figures)
        written.append(name)
        parts.append(f'<img src="{esc(name)}" alt="speedup waterfall of {esc(col.label)}">')
    parts.append(f"<pre>{esc(result_table(col.result))}</pre>")
    history = rung_history(col.result, data.ladders)
    parts += [
        "<h4>Each rung's history over the committed results</h4>",
        html_table(["rung", "measured at", "commit", "samples/s", "result file"], history),
    ]
    return "\n".join(parts)


def scenario_page(scenario: str, cols: list[compare.Column], data: SiteData, out: Path, written: list[str]) -> str:
    """The per-card table, the published figures' verdicts per card, then each card's ladders."""
    headers, rows = compare.comparison_table(scenario, cols, per_card=True)
    body = [f"<h2>Per card</h2>\n<p>{esc(compare.PER_CARD_TITLE)}</p>", html_table(headers, rows)]
    headers, rows = compare.card_verdicts(scenario, cols, data.figures)
    if rows:
        body += ["<h2>Published figures, per card</h2>", html_table(headers, rows)]
    for card in dict.fromkeys(col.result["target"]["name"] for col in cols):
        body.append(f'<h2 id="{esc(slug(card))}">{esc(card)}</h2>')
        body += [_ladder_section(col, data, out, written) for col in cols if col.result["target"]["name"] == card]
    return page(scenario, "\n".join(body) + "\n")


def trained_page(data: SiteData, out: Path, written: list[str]) -> str:
    """The trained-policy success tables (train-ladder results), newest first, with their loss curves."""
    body = ["<p>Rungs trained identically to a policy, each evaluated in LIBERO and judged against the reference.</p>"]
    for path, result in sorted(data.trained, key=lambda x: x[1]["provenance"]["created_at"], reverse=True):
        name = f"{FIGURES}/{slug(Path(path).parent.name)}-{slug(figure_stem(path, result))}-loss.png"
        loss_curves(result, out / name)
        written.append(name)
        body += [
            f"<h2>{esc(path)}</h2>",
            f"<p>{esc(provenance_line(path, result))}</p>",
            f"<pre>{esc(result_table(result))}</pre>",
            f'<img src="{esc(name)}" alt="training loss of {esc(path)}">',
        ]
    return page("Trained policies", "\n".join(body) + "\n")


def previous_site(out: Path, force: bool) -> list[str]:
    """The files a previous site in `out` wrote (to replace); refuses a non-empty directory that is no site
    unless `force`."""
    check_out_dir(out, "OUT")
    if (out / MARKER).is_file():
        return (out / MARKER).read_text().split()
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError(
            str(out), "OUT", "a new or empty directory or a previous site (--force to write into it anyway)",
            "a non-empty directory that is not a vlabench site",
        )  # fmt: skip
    return []


def build_site(repo: Path, out: Path, force: bool = False) -> list[str]:
    """Write the site of the committed results under `out`; returns the files written, relative to `out`."""
    out = Path(out)
    old = previous_site(out, force)
    data = load_site_data(Path(repo))
    for rel in old:  # a previous site's files go, so that nothing stale stays
        target = (out / rel).resolve()
        if target.is_relative_to(out.resolve()) and target.is_file():
            target.unlink()
    (out / FIGURES).mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    pages = {"index.html": index_page(data), "trained.html": trained_page(data, out, written)}
    for scenario, cols in compare.columns(data.results).items():
        pages[f"{slug(scenario)}.html"] = scenario_page(scenario, cols, data, out, written)
    for name, text in pages.items():
        (out / name).write_text(text, encoding="utf-8")
    written = [*pages, *written]
    (out / MARKER).write_text("\n".join(written) + "\n")
    return written
