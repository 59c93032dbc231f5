"""SIGKILL in the middle of a training node, re-invoke: it resumes from its checkpoint and ends
with the weights of an uninterrupted run, in one MLflow run, with no duplicate steps."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from ssmax.lit.hold import held_marker

pytestmark = pytest.mark.slow

SETTINGS = [  # (a)'s pretraining alone (pipeline.targets): the node that is killed
    "preset=smoke", "pipeline.variants=[a_softmax]", "pipeline.targets=[pretrain]",
    "trainer.pretrain.max_steps=30",  # resumed from step 10 past two more checkpoints
    "trainer.checkpoint_every_n_steps=10", "trainer.log_every_n_steps=1",
    "trainer.deterministic=true",
]  # fmt: skip
NODE = "pipeline/nodes/pretrain/a_softmax/seed0"


# The first try's training waits after step 12 (a checkpoint of step 10 on disk) until it is
# killed: the kill lands mid-training however fast the machine is. trainer.callbacks is not
# part of the node's fingerprint: the re-invocation without it resumes the same node.
HOLD = "trainer.callbacks=[{_target_: ssmax.lit.hold.HoldAtStep, step: 12}]"


def pipeline(out: Path, cache: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ssmax.pipeline",
        "run",
        *SETTINGS,
        f"paths.output_dir={out}",
        f"paths.cache_dir={cache}",
        *extra,
    ]


def node_dir(out: Path) -> Path:
    (folder,) = (out / NODE).iterdir()
    return folder


def loss_steps(out: Path) -> tuple[list[int], int]:
    client = MlflowClient(f"sqlite:///{out}/mlflow.db")
    exp = client.get_experiment_by_name("ssmax-repro")
    runs = client.search_runs([exp.experiment_id], "tags.stage = 'pretrain'")
    steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, "train/loss")]
    return steps, len(runs)


def test_killed_training_node_resumes_to_identical_weights(
    tmp_path: Path, shared_cache: Path
) -> None:
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    subprocess.run(pipeline(straight, shared_cache), check=True, capture_output=True)

    proc = subprocess.Popen(
        pipeline(killed, shared_cache, HOLD),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if list((killed / NODE).glob(f"*/{held_marker('', 12)}")):
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    folder = node_dir(killed)
    assert held_marker(folder, 12).exists() and (folder / "checkpoints" / "last.ckpt").exists()
    assert not (folder / "done.json").exists() and not (folder / "model.pt").exists()
    partial, _ = loss_steps(killed)
    assert max(partial, default=0) < 29  # killed before the end

    out = subprocess.run(pipeline(killed, shared_cache), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    want = torch.load(node_dir(straight) / "model.pt", weights_only=True)
    got = torch.load(folder / "model.pt", weights_only=True)
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want)
    steps, runs = loss_steps(killed)
    assert runs == 1  # the resumed node continued its MLflow run
    assert steps == sorted(set(steps)) == loss_steps(straight)[0]  # no duplicates, no gaps


def test_training_stopped_by_sigterm_exits_143_and_resumes(
    tmp_path: Path, shared_cache: Path
) -> None:
    """SIGTERM while training: one line, status 143 (not 0: Lightning's stop is a SystemExit
    without a status), no weights, the MLflow run KILLED; the same command goes on."""
    out, go = tmp_path / "out", tmp_path / "go"
    command = [sys.executable, "-m", "ssmax.train", "preset=smoke", f"paths.output_dir={out}",
               f"paths.cache_dir={shared_cache}", "trainer.pretrain.max_steps=30",
               "trainer.checkpoint_every_n_steps=10"]  # fmt: skip
    hold = f"trainer.callbacks=[{{_target_: ssmax.lit.hold.HoldAtStep, step: 12, release: '{go}'}}]"
    log = tmp_path / "train.log"
    with open(log, "w") as handle:
        proc = subprocess.Popen([*command, hold], stdout=handle, stderr=subprocess.STDOUT)
    folder = out / "runs" / "a_softmax-pretrain-seed0"
    deadline = time.monotonic() + 300
    while not held_marker(folder, 12).exists() and proc.poll() is None:
        assert time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    go.touch()
    assert proc.wait(timeout=300) == 128 + signal.SIGTERM, log.read_text()[-2000:]
    said = [line for line in log.read_text().splitlines() if "stopped by SIGTERM" in line]
    assert len(said) == 1 and "last.ckpt" in said[0], log.read_text()[-2000:]
    assert not (folder / "model.pt").exists() and (folder / "checkpoints" / "last.ckpt").exists()
    client = MlflowClient(f"sqlite:///{out}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("ssmax-repro").experiment_id])
    assert run.info.status == "KILLED"

    again = subprocess.run(command, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (folder / "model.pt").exists()
    assert client.get_run(run.info.run_id).info.status == "FINISHED"


def test_sigterm_to_the_local_runner_stops_its_workers(tmp_path: Path, shared_cache: Path) -> None:
    """SIGTERM to `ssmax.pipeline run` (executor=local) alone, not its process group: its
    workers are forks of the forkserver, not its children, and trained on after it ended; now
    it ends them on its way out, with status 143, and closes their runs and its own (KILLED)
    there, not at the next start."""
    out, log = tmp_path / "out", tmp_path / "pipeline.log"
    with open(log, "w") as handle:
        proc = subprocess.Popen(pipeline(out, shared_cache, HOLD, "executor=local"),
                                stdout=handle, stderr=subprocess.STDOUT)  # fmt: skip
    deadline = time.monotonic() + 300
    while not list((out / NODE).glob(f"*/{held_marker('', 12)}")):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.05)
    started = "run     pretrain/a_softmax/seed0 (pid "
    (pid,) = [int(line.split(started)[1].rstrip(")")) for line in log.read_text().splitlines()
              if started in line]  # fmt: skip
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM, log.read_text()[-2000:]
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}").exists() and "Z" not in _state(pid):
        assert time.monotonic() < deadline, f"worker {pid} still running after the runner ended"
        time.sleep(0.1)
    said = log.read_text()
    assert "closed 1 node run (pretrain/a_softmax/seed0)" in said, said[-2000:]
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    node = [r for r in runs if r.data.tags.get("node") == "pretrain/a_softmax/seed0"]
    assert [r.info.status for r in node] == ["KILLED"]
    # and its own run: stopped, not failed (it ended FAILED until 2026-11-29)
    assert [r.info.status for r in runs if r.data.tags.get("kind") == "pipeline"] == ["KILLED"]
    assert not [r for r in runs if r.info.status == "RUNNING"]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
