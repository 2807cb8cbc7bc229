"""The per-card page (docs/hardware.md) and the static results site (`vlabench site`), the site opened in a real
headless Chromium. The second card's results are a committed H200 result copied into the test's folder as "h100"
(never committed)."""

import copy
import json
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import InputError
from harness.judge.published import load_published
from harness.report import hardware, readme, site
from harness.results import load_result

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "results" / "h200" / "pi05-loongforge.json"
TRAINED = sorted((ROOT / "results" / "h200" / "evidence").glob("*/train-ladder.json"))[0]
HOSTILE = "<script>alert(1)</script>"
PNG = b"\x89PNG\r\n\x1a\n"


def as_card(result, name="h100", device="NVIDIA H100 80GB HBM3"):
    out = copy.deepcopy(result)
    out["target"].update(name=name, device_name=device)
    return out


def write(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A repository with pi05-loongforge on two cards, an older run of it, one card's gr00t ladder, a
    train-ladder, and a command line that HTML must not run."""
    root = tmp_path_factory.mktemp("repo")
    (root / "results").mkdir()
    (root / "results" / "published").symlink_to(ROOT / "results" / "published")
    h200 = load_result(H200)
    write(root / "results" / "h200" / "pi05-loongforge.json", h200)
    h100 = as_card(h200)
    h100["provenance"]["command"] = f"vlabench run {HOSTILE}"
    write(root / "results" / "h100" / "pi05-loongforge.json", h100)
    older = copy.deepcopy(h200)
    rec = next(r for r in older["rungs"] if r["name"] == "prune-empty-cameras")
    rec["measured"] = {**rec["measured"], "git_sha": "0ldc0mm1t" + "0" * 31, "created_at": "2026-11-20T00:00:00Z"}
    write(root / "results" / "h200" / "evidence" / "repeats" / "pi05-loongforge-older.json", older)
    write(root / "results" / "h200" / "gr00t-loongforge.json", load_result(ROOT / "results/h200/gr00t-loongforge.json"))
    write(root / "results" / "h200" / "evidence" / TRAINED.parent.name / "train-ladder.json", load_result(TRAINED))
    return root


def test_hardware_page_shows_the_scenarios_on_two_cards(repo):
    figures = load_published(ROOT / "results" / "published")
    text = hardware.hardware_page(readme._results(repo), figures)
    assert "Cards with ladder results: h100 (pi05-loongforge); h200 (gr00t-loongforge, pi05-loongforge)." in text
    assert "Scenarios measured on two or more cards: pi05-loongforge." in text
    assert "### pi05-loongforge: per card" in text and "### gr00t-loongforge" not in text  # one card only
    assert "| h100 % of floor " in text and "| h100: verdict (ours) " in text
    gr00t = [(p, r) for p, r in readme._results(repo) if r["scenario"]["name"] == "gr00t-loongforge"]
    alone = hardware.hardware_page(gr00t, figures)  # on h200 only
    assert "No scenario has results on two or more cards yet" in alone and "### gr00t-loongforge: per card" in alone
    committed = (ROOT / "docs" / "hardware.md").read_text()  # `vlabench readme --check` keeps it current
    several = hardware.multi_card(readme.compare.columns(readme._results(ROOT)))
    assert ("Scenarios measured on two or more cards" in committed) == bool(several)


def test_the_coverage_table_counts_every_rung_of_every_ladder_on_every_card(repo):
    """docs/hardware.md's coverage: per scenario and card, the rungs that ran, were refused up front, failed (in
    bold) or were never measured, from the real scenario files and the recorded results."""
    from harness.scenario import load_scenario

    scenarios = [load_scenario(ROOT / "scenarios" / f"{n}.yaml") for n in ("pi05-loongforge", "gr00t-loongforge")]
    results = readme._results(repo)
    table = "\n".join(hardware.coverage_table(results, scenarios))
    assert "| scenario | h100 | h200 |" in table
    assert "| pi05-loongforge (7 rungs) | 7/7 ran | 7/7 ran |" in table
    assert "| gr00t-loongforge (12 rungs) | not measured | 10/12 ran, 2 refused up front |" in table
    h100 = next(r for p, r in results if p == "results/h100/pi05-loongforge.json")
    broken = copy.deepcopy(h100)
    broken["rungs"][1]["status"] = "oom"
    del broken["rungs"][2]
    others = [(p, r) for p, r in results if p != "results/h100/pi05-loongforge.json"]
    table = "\n".join(hardware.coverage_table([*others, ("x.json", broken)], scenarios))
    assert "| pi05-loongforge (7 rungs) | 5/7 ran, **1 oom**, 1 not measured | 7/7 ran |" in table
    # a rung that ran in any committed result of the card (an evidence run beside the baseline) counts as run
    table = "\n".join(hardware.coverage_table([*results, ("evidence.json", broken)], scenarios))
    assert "| pi05-loongforge (7 rungs) | 7/7 ran | 7/7 ran |" in table
    committed = (ROOT / "docs" / "hardware.md").read_text()
    assert "## Coverage: every ladder on every card" in committed and "| pi05-beyond (14 rungs) |" in committed


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links = []

    def handle_starttag(self, tag, attrs):
        self.links += [v for k, v in attrs if k in ("href", "src") and v]


def local_links(out: Path) -> list[tuple[Path, str]]:
    found = []
    for page in out.glob("*.html"):
        parser = Links()
        parser.feed(page.read_text())
        found += [(page, link) for link in parser.links if "://" not in link]
    return found


def assert_links_resolve(out: Path) -> None:
    links = local_links(out)
    assert links
    for page, link in links:
        target = link.split("#")[0]
        assert not target or (page.parent / target).is_file(), f"{page.name}: {link} points to no file"


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def browse(tmp_path: Path, page: Path, *flags: str) -> str:
    cmd = [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    done = subprocess.run([*cmd, *flags, page.as_uri()], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.skipif(chromium() is None, reason="no chromium or chromium-browser binary (apt-get install chromium)")
def test_site_opens_in_a_headless_browser(repo, tmp_path):
    out = tmp_path / "site"
    written = site.build_site(repo, out)
    assert {"index.html", "trained.html", "pi05-loongforge.html", "gr00t-loongforge.html"} <= set(written)
    assert_links_resolve(out)
    index = browse(tmp_path, out / "index.html", "--dump-dom")
    assert '<a href="pi05-loongforge.html#h100">' in index and '<a href="pi05-loongforge.html#h200">' in index
    assert '<a href="gr00t-loongforge.html#h200">' in index and "<table>" in index
    # the goals per card, as docs/hardware.md has them: the fixture has no pi05-beyond result, h100 no gr00t one
    assert "<h2>Goals per card</h2>" in index and "<td>no results/h100/gr00t-loongforge.json</td>" in index
    assert "<td>not measured</td>" in index and "<td>docs/ladders.md#on-an-h100-the-same-ladders-on-80-gb</td>" in index
    dom = browse(tmp_path, out / "pi05-loongforge.html", "--dump-dom")
    for card in ("h100", "h200"):
        assert f'<h2 id="{card}">' in dom and f'<img src="figures/pi05-loongforge-{card}-waterfall.png"' in dom
        assert f"<th>{card} % of floor</th>" in dom and f"<th>{card}: verdict (ours)</th>" in dom
    assert "<td>0ldc0mm1t0</td>" in dom and "results/h200/evidence/repeats/pi05-loongforge-older.json" in dom  # history
    assert "<script" not in dom and "vlabench run &lt;script&gt;alert(1)&lt;/script&gt;" in dom  # escaped
    trained = browse(tmp_path, out / "trained.html", "--dump-dom")
    assert "success gate" in trained and '-loss.png"' in trained
    shot = tmp_path / "shot.png"
    browse(tmp_path, out / "pi05-loongforge.html", f"--screenshot={shot}", "--window-size=1280,2000")
    assert shot.read_bytes().startswith(PNG) and shot.stat().st_size > 50_000  # a rendered page, not a blank one


def test_site_writes_only_into_a_new_empty_or_previous_site(repo, tmp_path, capsys):
    out = tmp_path / "site"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not a vlabench site"):
        site.build_site(repo, out)
    assert main(["site", str(out), "--repo", str(repo)]) == 2 and list(out.iterdir()) == [out / "notes.txt"]
    assert main(["site", str(out), "--repo", str(repo), "--force"]) == 0
    marker = out / site.MARKER
    (out / "figures" / "stale.png").write_bytes(PNG)
    marker.write_text(marker.read_text() + "figures/stale.png\n../outside.txt\n")
    (tmp_path / "outside.txt").write_text("kept")
    assert main(["site", str(out), "--repo", str(repo)]) == 0  # a previous site: rebuilt in place
    assert not (out / "figures" / "stale.png").exists() and (tmp_path / "outside.txt").exists()
    assert (out / "notes.txt").read_text() == "mine" and "site: " in capsys.readouterr().out
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError):
        site.build_site(repo, tmp_path / "file")


def test_the_committed_results_build_a_site_in_under_a_minute(tmp_path):
    start = time.monotonic()
    written = site.build_site(ROOT, tmp_path / "site")
    assert time.monotonic() - start < 60
    assert_links_resolve(tmp_path / "site")
    pngs = [w for w in written if w.endswith(".png")]
    assert pngs and all((tmp_path / "site" / w).read_bytes().startswith(PNG) for w in pngs)
