"""scripts/theta_probe.py on a finished smoke SFT node: teacher-forced recall by token of the
value and the needle test at both thetas, as rows a reader can check; a folder that is not a
node's is one line and status 2."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # reads the session's smoke pipeline; ~20 s

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "theta_probe.py"


def probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=600)  # fmt: skip


def test_probe_rows_of_an_sft_node(smoke_pipeline: list[str], tmp_path: Path) -> None:
    out = Path(next(o.split("=", 1)[1] for o in smoke_pipeline if o.startswith("paths.output")))
    (node,) = out.glob("pipeline/nodes/sft/b_ssmax/seed0/*/")
    rows_json = tmp_path / "rows.json"
    done = probe(str(node), "--rows", "8", "--niah", "2", "--json", str(rows_json))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(rows_json.read_text())
    recall = [r for r in rows if "recall" in r]
    assert [r["factor"] for r in recall] == [1.0, 50.0]
    for r in recall:
        assert r["asked"] > 0 and 0 <= r["recall"] <= 1
        assert r["by_token"][0] >= r["recall"] and all(0 <= x <= 1 for x in r["by_token"])
    needle = [r for r in rows if "niah" in r]
    assert [r["factor"] for r in needle] == [1.0, 50.0]
    prompts = 3 * 2  # the smoke preset's 3 depths, 2 prompts each
    for r in needle:
        assert list(r["niah"]) == ["2", "4"]  # its first context multiples (64 tokens: no 1x)
        assert all(abs(a * prompts - round(a * prompts)) < 1e-9 for a in r["niah"].values())
    assert done.stdout.count("NIAH full") == 2


def test_a_folder_that_is_not_a_node(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # the script's main in this process (the test above runs it as a command): one line, 2
    main = runpy.run_path(str(SCRIPT))["main"]
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no config.yaml and model.pt" in err
