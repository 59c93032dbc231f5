"""What a GPU loan runs, dry-run on the CPU: `bash scripts/gpu_bench.sh confirm` (the registered
GPU run, ssmax.registration.gpu) over a smoke registration of two bundled seeds of (a), seed 1's
NIAH eval failing as a loan's end would leave it unfinished. The seeds whose every node finished
get the report over them and their records, which come back first in the call's OUT
(records-<name>.tgz); the other is left for the next loan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from ssmax.registration.gpu import finished_seeds
from ssmax.registration.run import record_path, to_run
from ssmax.verdicts.registered import ROOT, load
from tests.test_registration import smoke_registration

# On the pipeline's PYTHONPATH as sitecustomize.py: one path pattern that cannot be written (the
# eval bundle evaluates the other seeds, then fails)
FAIL_WRITE = """
import builtins, fnmatch, io, os

_open, _pattern = builtins.open, os.environ.get("SSMAX_FAIL_WRITE")


def _guarded(file, mode="r", *args, **kwargs):
    if (_pattern and isinstance(file, (str, os.PathLike)) and set(mode) & set("wxa+")
            and fnmatch.fnmatch(os.path.abspath(os.fspath(file)), _pattern)):
        raise OSError(f"a test's fault: {file} cannot be written")
    return _open(file, mode, *args, **kwargs)


builtins.open = io.open = _guarded
"""


def confirm(
    tmp_path: Path, registration: Path, timeout: int, **env: str
) -> subprocess.CompletedProcess:
    """`bash scripts/gpu_bench.sh confirm` as a loan runs it, this suite's python3 first on PATH,
    OUT and CONFIRM_DIR in tmp_path, the registration's gpu run, and env."""
    env = os.environ | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "OUT": str(tmp_path / "out"), "CONFIRM_DIR": str(tmp_path / "confirm"),
        "REGISTRATION": str(registration), **env,
    }  # fmt: skip
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu_bench.sh"), "confirm"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)  # fmt: skip


@pytest.mark.slow
def test_a_loan_that_ends_early_returns_the_seeds_it_finished(tmp_path: Path) -> None:
    path = smoke_registration(tmp_path, variants=["a_softmax"],
                              runs={"cpu": {"seeds": [0]}, "gpu": {"seeds": [0, 1]}})  # fmt: skip
    reg = load(path)
    hooks, out, work = tmp_path / "hooks", tmp_path / "out", tmp_path / "confirm"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(FAIL_WRITE)
    said = confirm(
        tmp_path, path, 900, PYTHONPATH=os.pathsep.join([str(hooks), str(ROOT / "src")]),
        SSMAX_FAIL_WRITE="*/nodes/eval_niah/a_softmax/seed1/*/records.jsonl", WORKERS="2",
        BENCH_COMMIT="f" * 40, CONFIRM_ARGS="--accelerator cpu",
    )  # fmt: skip
    assert said.returncode == 0, said.stdout[-3000:] + said.stderr[-3000:]
    assert "1 of 2 seeds recorded" in said.stdout, said.stdout[-3000:]
    with tarfile.open(out / "records-smoke.tgz") as records:
        assert sorted(records.getnames()) == ["gpu", "gpu/seed0.json"]
    assert finished_seeds(reg, work / "smoke" / "outputs-gpu", [0, 1]) == [0]
    rec = json.loads(record_path(reg, "gpu", 0).read_text())
    assert rec["seed"] == 0 and rec["run"]["seeds"] == [0] and set(rec["results"]) == {"a_softmax"}
    assert "one of 2 run together" in rec["about"] and rec["commit"] == "f" * 40
    assert rec["nodes"]["pretrain/a_softmax/seed0"]["bundle"]["seeds"] == [0, 1]
    assert to_run(reg, "gpu") == [1]  # the next loan's
    assert (out / "confirm-smoke.tgz").stat().st_size > 0


def test_a_registration_the_budget_cannot_hold_is_not_started(tmp_path: Path) -> None:
    """BUDGET_S is the device call's: a run that would have under CONFIRM_MIN_S of it is not
    started (its seeds wait for the next loan) and the script still ends well."""
    path = smoke_registration(tmp_path, runs={"cpu": {"seeds": [0]}, "gpu": {"seeds": [0]}})
    said = confirm(tmp_path, path, 300, BUDGET_S="100")  # 100 - 40 kept for packing < 120
    assert said.returncode == 0, said.stderr[-2000:]
    assert "confirm: smoke not started: " in said.stdout and "left of BUDGET_S=100" in said.stdout
    assert not (tmp_path / "confirm").exists() and not (tmp_path / "results").exists()
