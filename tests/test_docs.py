"""README.md and docs/*.md: every relative link points to a file (and heading) that exists, every
docs page is linked from the README, and the fenced `bash` snippets marked `<!-- tested -->` on
the line before them run from the repository root with the venv's python first on PATH, each
exiting 0. Only cheap commands that need no network and write nothing are marked. The lists of
variants and laws kept by hand (README's tables, laws.py's docstring) hold what the code holds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ssmax.config.variants import names
from ssmax.model import laws, positions

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
MARK = "<!-- tested -->"
FENCE = re.compile(r"^\s*(`{3,}|~{3,})(.*)$")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def split_fences(text: str) -> tuple[str, list[tuple[int, str, str]]]:
    """The text outside fenced code blocks, and each block: (its first line's number, the
    fence's info string, its code)."""
    prose, blocks, lines = [], [], text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            prose.append(lines[i])
            i += 1
            continue
        fence, info, start, code = opening[1], opening[2].strip(), i + 1, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            code.append(lines[i])
            i += 1
        blocks.append((start, info, "\n".join(code) + "\n"))
        i += 1
    return "\n".join(prose), blocks


def links(page: Path) -> list[str]:
    prose, _ = split_fences(page.read_text())
    prose = re.sub(r"(`+).*?\1", "", prose, flags=re.S)  # inline code is not a link
    return LINK.findall(prose) + REFERENCE.findall(prose)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    prose, _ = split_fences(page.read_text())
    return {slug(m) for m in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", prose, flags=re.M)}


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    out = []
    for target in links(page):
        if SCHEME.match(target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{page.relative_to(root)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{page.relative_to(root)}: {target} (no such heading)")
    return out


def test_every_relative_link_points_to_an_existing_file() -> None:
    assert len(PAGES) > 1, "docs/*.md not found"
    assert [b for page in PAGES for b in broken_links(page)] == []


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(README) if not SCHEME.match(t)}
    assert [p.name for p in PAGES[1:] if p.resolve() not in linked] == []


def test_the_link_check_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Top\n[ok](page.md) [ok](#top) `[code](nowhere.md)` [web](https://example.org)\n"
        '```python\nf = d["k"](x)\n```\n[gone](missing.md) [no heading](page.md#nowhere)\n'
    )
    assert broken_links(page, root=tmp_path) == [
        "page.md: missing.md (no such file)",
        "page.md: page.md#nowhere (no such heading)",
    ]


def marked_snippets() -> list[tuple[str, int, str]]:
    """Each fenced block right after a MARK line: (page, line, code); a mark on anything but a
    bash block is an error."""
    found = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        _, blocks = split_fences(page.read_text())
        by_line = {start: (info, code) for start, info, code in blocks}
        for i, line in enumerate(lines):
            if line.strip() != MARK:
                continue
            name = f"{page.relative_to(ROOT)}:{i + 2}"
            info, code = by_line.get(i + 2, ("", ""))  # the fence is the mark's next line
            assert info == "bash", f"{name}: {MARK} must be the line right before a ```bash fence"
            found.append((name, i + 2, code))
    return found


SNIPPETS = marked_snippets()


def test_the_readme_has_tested_snippets() -> None:
    assert any(name.startswith("README.md:") for name, _, _ in SNIPPETS)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "line", "code"), SNIPPETS, ids=[s[0] for s in SNIPPETS])
def test_marked_snippet_runs(name: str, line: int, code: str) -> None:
    bin_dir = Path(sys.executable).parent  # the venv's bin (not resolved: the link is the venv)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard
    )
    tail = result.stderr[-3000:]
    assert result.returncode == 0, f"{name}: exit {result.returncode}\n{code}\n{tail}"


def _variants_in_tables(text: str) -> list[str]:
    """The `variant=` names of the page's variant tables (a row: | `name` | ...)."""
    return re.findall(r"^\| `([a-z]+_[a-z0-9_]+)` \|", text, re.M)


def test_the_readme_tables_list_every_variant_once() -> None:
    """The README's variant tables hold exactly the conf/variant/*.yaml files: a variant added,
    renamed or removed shows here (issue 46: hand-kept lists drift)."""
    listed = _variants_in_tables(README.read_text())
    assert sorted(listed) == sorted(names()) and len(listed) == len(set(listed))


def test_the_law_file_names_every_law_it_holds() -> None:
    """laws.py's docstring table names every law, score law and normaliser its registries
    hold, and nothing else of that kind (positions.py's, its position functions); every law a
    variant file names is one of them."""
    text = laws.__doc__ or ""
    row = re.compile(r"^ {4,6}([a-z][a-z0-9_]*)\s{2,}", re.M)
    table = set(row.findall(text))
    held = {*laws.LAWS, *laws.ADAPTIVE, *laws.SCORE_LAWS}
    assert held == table, (held - table, table - held)
    assert set(row.findall(positions.__doc__ or "")) == {
        "rope_frequencies", "nape_slopes", "yarn_frequencies"
    }  # fmt: skip
    assert set(laws.NORMALIZERS) <= set(
        re.findall(r"\b(softmax|entmax|adaptive_temperature)\b", text)
    )
    assert set(laws.GATES) <= set(re.findall(r"\b(elementwise)\b", text))  # issue 60
    named = {OmegaConf.load(p).get(k) for p in (ROOT / "conf" / "variant").glob("*.yaml")
             for k in ("scale", "score_law", "normalizer")}  # fmt: skip
    assert named - {None, "none"} <= {*laws.LAWS, *laws.SCORE_LAWS, *laws.NORMALIZERS}, named
