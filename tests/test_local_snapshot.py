"""The local executor's workers run the code as planned (executor.snapshot, on by default): an
edit of the checkout while a run goes reaches no worker."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ssmax.lit.hold import held_marker

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_an_edit_of_the_checkout_during_a_local_run_reaches_no_worker(
    tmp_path: Path, shared_cache: Path
) -> None:
    """A run from a copy of the repository; while its pretraining holds at step 3, every module
    of the copy's src/ is replaced by one that fails to import (an edit, a branch switched).
    The run goes on to the end: its workers, the ones started after the edit too, and the
    pipeline process's own late imports (inline nodes) take the snapshot made when it
    started."""
    repo = tmp_path / "repo"
    for name in ("src", "conf", "pipelines"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "data").symlink_to(ROOT / "data", target_is_directory=True)
    commit = _committed(repo)
    go, out = tmp_path / "go", tmp_path / "out"
    hold = f"trainer.callbacks=[{{_target_:ssmax.lit.hold.HoldAtStep,step:3,release:'{go}'}}]"
    env = os.environ | {"PYTHONPATH": str(repo / "src")}
    command = [sys.executable, "-m", "ssmax.pipeline", "run", "preset=smoke", "executor=local",
               "pipeline.variants=[a_softmax]", f"paths.output_dir={out}",
               f"paths.cache_dir={shared_cache}", hold]  # fmt: skip
    with open(tmp_path / "run.log", "w") as log:
        run = subprocess.Popen(command, cwd=repo, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 600  # a condition polled, however fast the machine
        # under nodes/: not pipeline/snapshots/, where the snapshot's folder is renamed into
        # place (a glob there met its temporary folder gone: FileNotFoundError, 2026-11-28)
        while not list(out.glob(f"pipeline/nodes/**/{held_marker('', 3)}")):
            assert run.poll() is None, (tmp_path / "run.log").read_text()
            assert time.monotonic() < deadline, "pretraining never reached step 3"
            time.sleep(0.2)
        edited = list((repo / "src").rglob("*.py"))
        for path in edited:
            path.write_text('raise ImportError("edited during the run")\n')
        for cache in list((repo / "src").rglob("__pycache__")):
            shutil.rmtree(cache)
        go.touch()
        assert run.wait(600) == 0, (tmp_path / "run.log").read_text()
    finally:
        run.kill()
    said = (tmp_path / "run.log").read_text()
    assert len(edited) > 50 and "edited during the run" not in said
    assert "FAILED" not in said and "done    report" in said, said
    (snapshot,) = (out / "pipeline" / "snapshots").iterdir()
    assert "raise ImportError" not in (snapshot / "src/ssmax/pipeline/executors.py").read_text()
    # the snapshot is no repository: every node's record still names the commit the run
    # started from (2026-11-28: "unknown" in the workers' records since the snapshot came)
    records = [json.loads(p.read_text()) for p in (out / "pipeline" / "nodes").rglob("done.json")]
    assert len(records) > 5 and {r["git_commit"] for r in records} == {commit}


def _committed(repo: Path) -> str:
    """repo made a git repository of one commit; its hash."""
    git = ["git", "-C", str(repo), "-c", "user.name=test", "-c", "user.email=test@localhost"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "copy"]):
        subprocess.run([*git, *args], check=True, capture_output=True, timeout=120)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True, timeout=60).stdout.strip()  # fmt: skip


def test_a_run_after_an_earlier_run_s_folder_was_deleted_starts_from_its_own_snapshot(
    tmp_path: Path, shared_cache: Path
) -> None:
    """Two local runs of the same code in one process, in two folders, the first folder
    deleted between them: the second run's workers import from its own snapshot. A forkserver
    kept for the same code served the first folder's copy, gone (found by the suite once it
    kept only failed tests' folders: FileNotFoundError on the copy's embedded corpus)."""
    from ssmax.pipeline.__main__ import main

    def run(out: Path) -> int:
        return main(["run", "preset=smoke", "pipeline.variants=[a_softmax]",
                     "pipeline.targets=[pretrain]", "executor=local", "executor.workers=1",
                     "trainer.pretrain.max_steps=2", "tracking.enabled=false",
                     f"paths.output_dir={out}", f"paths.cache_dir={shared_cache}"])  # fmt: skip

    assert run(tmp_path / "first") == 0
    shutil.rmtree(tmp_path / "first")
    assert run(tmp_path / "second") == 0
    assert list((tmp_path / "second" / "pipeline" / "nodes").rglob("model.pt"))
