"""Hydra multirun of the train entry on the local SLURM cluster (hydra/launcher=ssmax_slurm with
a cluster profile): one array job, each run lands in MLflow."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

pytestmark = pytest.mark.slurm


def train(*args: str) -> subprocess.CompletedProcess[str]:
    # The fixture put SLURM_CONF (and the sacct stand-in) in os.environ: the client inherits it.
    return subprocess.run([sys.executable, "-m", "ssmax.train", *args],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_multirun_over_two_variants_on_the_cluster(
    slurm_cluster, tmp_path: Path, shared_cache: Path
) -> None:
    before = set(slurm_cluster.run("squeue", "-h", "-t", "all", "-o", "%i").split())
    out = train("-m", "preset=smoke", "variant=a_softmax,b_ssmax", "trainer.pretrain.max_steps=4",
                "hydra/launcher=ssmax_slurm", "+executor/slurm/profile=local",
                f"paths.output_dir={tmp_path}", f"paths.cache_dir={shared_cache}")  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = set(slurm_cluster.run("squeue", "-h", "-t", "all", "-o", "%i").split()) - before
    assert len(jobs) == 2 and all("_" in j for j in jobs)  # one array job, two tasks
    deadline = time.monotonic() + 120  # results come back while SLURM is still COMPLETING
    while {slurm_cluster.state(j) for j in jobs} != {"COMPLETED"} and time.monotonic() < deadline:
        time.sleep(0.5)
    assert {slurm_cluster.state(j) for j in jobs} == {"COMPLETED"}
    script = next((tmp_path / "multirun" / "submitit").glob("*/*_submission.sh")).read_text()
    # the profile's resources (conf/executor/slurm/profile/local.yaml)
    assert "--partition=debug" in script and "--time=30" in script
    assert "--cpus-per-task=1" in script and "--signal=USR2@30" in script
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("ssmax-repro")
    runs = client.search_runs([exp.experiment_id])
    assert sorted(r.data.tags["variant"] for r in runs) == ["a_softmax", "b_ssmax"]
    assert all(r.info.status == "FINISHED" and "train/loss" in r.data.metrics for r in runs)


def test_launcher_without_a_profile_fails_in_one_line(tmp_path: Path) -> None:
    out = train("-m", "preset=smoke", "variant=a_softmax,b_ssmax", "hydra/launcher=ssmax_slurm",
                f"paths.output_dir={tmp_path}")  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.startswith("error: hydra/launcher=ssmax_slurm needs a cluster profile")
    assert out.stderr.count("\n") == 1
