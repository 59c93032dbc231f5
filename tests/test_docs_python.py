"""Every fenced `python` snippet of README.md and docs/*.md runs, as a reader would run it from
the repo root after `make reproduce-all PRESET=smoke` and `make export NODE=sft/b_ssmax/seed0`:
here in a folder whose `outputs/` holds the session's smoke pipeline store and that export."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # an export and two model loads in fresh processes: ~40 s

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^( *)```python\n(.*?)^\1```", re.M | re.S)


def snippets() -> list[tuple[str, str]]:
    """(page:line, code) of every python fence, dedented (fences inside list items)."""
    out = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            line = text[: match.start()].count("\n") + 1
            out.append((f"{page.relative_to(ROOT)}:{line}", textwrap.dedent(match.group(2))))
    return out


def test_the_pages_hold_python_snippets() -> None:
    assert len(snippets()) >= 2  # docs/models-out.md: transformers and MLflow


@pytest.fixture(scope="module")
def reader_folder(smoke_pipeline: list[str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder laid out as the repo root after the smoke pipeline and its (b) SFT export."""
    store = Path(next(o.split("=", 1)[1] for o in smoke_pipeline if o.startswith("paths.output")))
    here = tmp_path_factory.mktemp("reader")
    (here / "outputs").mkdir()
    (here / "outputs" / "mlflow.db").symlink_to(store / "mlflow.db")
    out = here / "outputs" / "export" / "sft-b_ssmax-seed0"
    cmd = [sys.executable, "-m", "ssmax.export", "--node", "sft/b_ssmax/seed0", "--out", str(out),
           *smoke_pipeline]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return here


@pytest.mark.parametrize(("where", "code"), snippets(), ids=[w for w, _ in snippets()])
def test_python_snippet_runs(where: str, code: str, reader_folder: Path) -> None:
    done = subprocess.run([sys.executable, "-c", code], cwd=reader_folder, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, f"{where}\n{done.stderr[-3000:]}"
