"""Every relative markdown link in README.md and docs/**/*.md resolves: the file or folder exists and, for an anchor
into a .md page, a heading with that GitHub slug (lowercase, punctuation removed, spaces to '-', '-1', '-2' for
repeats) or an explicit <a id=...> exists. Links inside code spans and fenced blocks are not links."""

import re
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ID = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def slug(text: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading counts by its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found: set[str] = set()
    fence = False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        found.update(HTML_ID.findall(line))
        heading = HEADING.match(line)
        if heading:
            name = slug(heading.group(2))
            found.add(name if name not in seen else f"{name}-{seen[name]}")
            seen[name] = seen.get(name, 0) + 1
    return found


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return LINK.findall(re.sub(r"`[^`\n]*`", "", text))


def broken(root: Path) -> list[str]:
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    cache: dict[Path, set[str]] = {}
    bad = []
    for page in pages:
        for target in links(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
                continue  # http:, mailto: and the like
            path, _, anchor = target.partition("#")
            dest = (page.parent / unquote(path)).resolve() if path else page
            where = f"{page.relative_to(root)}: ({target})"
            if not dest.exists():
                bad.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md":
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if unquote(anchor) not in cache[dest]:
                    bad.append(f"{where}: no such heading")
    return bad


def test_every_relative_link_in_the_docs_resolves():
    assert broken(ROOT) == []


def test_the_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# Top\n\n[ok](docs/p.md#a-b-cpy) [bad](docs/p.md#nope)\n")
    (tmp_path / "docs" / "p.md").write_text(
        "# P\n\n## A b (`c.py`)\n\n## Dup\n\n## Dup\n\n[x](#dup-1) [y](gone.md) `[z](gone.md)`\n\n"
        "```\n[w](gone.md)\n```\n"
    )
    assert broken(tmp_path) == ["README.md: (docs/p.md#nope): no such heading", "docs/p.md: (gone.md): no such file"]
