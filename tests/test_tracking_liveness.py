"""Runs left RUNNING by processes that are gone are closed (issue 44, item 1): a pipeline killed
mid-training, started again, closes its predecessor's runs and says so in one line; runs whose
process may live (this one, another host's, another folder's, one without process tags) stay."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ssmax.tracking.client import Client
from ssmax.tracking.liveness import (
    BOOT,
    CLOSED,
    HOST,
    PID,
    SLURM_JOB,
    STARTED,
    folder_tag,
    gone,
    hand_to_job,
    pid_start,
    process_tags,
)
from ssmax.tracking.runs import close_dead
from ssmax.tracking.store import default_store

ROOT = Path(__file__).resolve().parents[1]


def dead_process_tags() -> dict[str, str]:
    """The process tags of a process that has ended (a real one, run and reaped)."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    pid = child.stdout.strip()
    return process_tags() | {PID: pid, STARTED: "1"}


def test_what_shows_a_process_gone() -> None:
    mine = process_tags()
    assert gone(mine) is None  # this process
    assert gone(mine | {HOST: "elsewhere"}) is None  # another machine's: unknowable here
    assert gone({}) is None  # a run from before these tags
    assert "was gone" in gone(dead_process_tags())
    assert "was gone" in gone(mine | {STARTED: "1"})  # the pid reused by a later process
    assert "restarted" in gone(mine | {BOOT: "another-boot"})
    assert pid_start(os.getpid()) == mine[STARTED]


def test_close_dead_closes_only_the_folder_s_runs_of_gone_processes(tmp_path: Path) -> None:
    uri = default_store(tmp_path)
    client = Client(uri)
    exp = client.create_experiment("runs")
    here, other = folder_tag(tmp_path), folder_tag(tmp_path / "other")
    dead = client.create_run(exp, run_name="dead", tags=dead_process_tags() | here)
    alive = client.create_run(exp, run_name="alive", tags=process_tags() | here)
    remote = client.create_run(exp, run_name="remote", tags=dead_process_tags() | here
                               | {HOST: socket.gethostname() + "-not"})  # fmt: skip
    elsewhere = client.create_run(exp, run_name="elsewhere", tags=dead_process_tags() | other)
    untagged = client.create_run(exp, run_name="untagged", tags=here)
    line = close_dead(uri, tmp_path)
    assert line is not None and "1 node run (dead)" in line and "\n" not in line
    status = {r: client.get_run(r.info.run_id).info for r in (dead, alive, remote, elsewhere,
                                                               untagged)}  # fmt: skip
    assert status[dead].status == "KILLED" and status[dead].end_time
    assert "was gone" in client.get_run(dead.info.run_id).data.tags[CLOSED]
    assert [status[r].status for r in (alive, remote, elsewhere, untagged)] == ["RUNNING"] * 4
    assert close_dead(uri, tmp_path) is None  # nothing left to close
    assert close_dead(default_store(tmp_path / "none"), tmp_path / "none") is None  # no store


def test_a_run_handed_to_a_slurm_job_is_that_job_s(tmp_path: Path) -> None:
    """A pipeline run on SLURM is ended by its closing job, not by the process that submitted
    it and exited: that process's death does not close it (here no squeue can vouch for the
    job, so it stays open; a cluster's squeue decides it)."""
    uri = default_store(tmp_path)
    client = Client(uri)
    exp = client.create_experiment("runs")
    run = client.create_run(exp, run_name="pipeline-slurm", tags=dead_process_tags()
                            | folder_tag(tmp_path) | {"kind": "pipeline"})  # fmt: skip
    hand_to_job(client, run.info.run_id, "4242")
    tags = client.get_run(run.info.run_id).data.tags
    assert tags[SLURM_JOB] == "4242" and PID not in tags and STARTED not in tags
    env_path = os.environ.get("PATH", "")
    os.environ["PATH"] = ""  # no squeue here, whatever this machine has
    try:
        assert close_dead(uri, tmp_path) is None
    finally:
        os.environ["PATH"] = env_path
    assert client.get_run(run.info.run_id).info.status == "RUNNING"


def pipeline(out: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "ssmax.pipeline", "run", "preset=smoke",
               "pipeline.variants=[a_softmax]", "pipeline.targets=[pretrain]",
               "executor=inprocess", f"paths.output_dir={out}", f"paths.cache_dir={cache}",
               *extra]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                          env=os.environ | {"PYTHONPATH": str(ROOT)})  # fmt: skip


@pytest.mark.slow  # two pipeline processes, ~16 s: with the slow modules, not last in the queue
def test_a_killed_pipeline_s_runs_are_closed_by_the_next(tmp_path: Path, shared_cache: Path):
    killed = pipeline(
        tmp_path, shared_cache, "trainer.callbacks=[{_target_:tests.faults.KillAt,step:3}]"
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    client = Client(default_store(tmp_path))
    exp = client.get_experiment_by_name("ssmax-repro").experiment_id
    left = client.search_runs([exp], "attributes.status = 'RUNNING'")
    assert sorted(r.data.tags.get("kind", "node") for r in left) == ["node", "pipeline"]
    again = pipeline(tmp_path, shared_cache)
    assert again.returncode == 0, again.stderr[-2000:]
    said = [line for line in again.stdout.splitlines() if line.startswith("closed ")]
    pipeline_run = next(r for r in left if r.data.tags.get("kind") == "pipeline")
    assert len(said) == 1 and pipeline_run.info.run_name in said[0] and "1 node run" in said[0]
    node_run = next(r for r in left if r.data.tags.get("kind") != "pipeline")
    closed = client.get_run(pipeline_run.info.run_id)
    assert closed.info.status == "KILLED" and closed.info.end_time
    assert "was gone" in closed.data.tags[CLOSED]
    resumed = client.get_run(node_run.info.run_id)  # the same run, resumed by the next pipeline
    assert resumed.info.status == "FINISHED" and CLOSED not in resumed.data.tags
    assert client.search_runs([exp], "attributes.status = 'RUNNING'") == []
