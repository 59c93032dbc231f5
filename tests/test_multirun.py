"""Hydra multirun over variants with the train entry: each run lands in MLflow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

pytestmark = pytest.mark.slow


def test_multirun_over_two_variants(tmp_path: Path, shared_cache: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ssmax.train", "-m", "preset=smoke",
         "variant=a_softmax,b_ssmax", "trainer.pretrain.max_steps=4",
         f"paths.output_dir={tmp_path}", f"paths.cache_dir={shared_cache}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("weights: ") == 2
    # each log line once: Lightning's own console handler and Hydra's printed it twice
    assert (out.stdout + out.stderr).count("`Trainer.fit` stopped: `max_steps=4` reached") == 2
    assert "Tip:" not in out.stdout + out.stderr  # Lightning's advert (ssmax.host.logs)
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("ssmax-repro")
    runs = client.search_runs([exp.experiment_id])
    assert sorted(r.data.tags["variant"] for r in runs) == ["a_softmax", "b_ssmax"]
    assert all(r.info.status == "FINISHED" and "train/loss" in r.data.metrics for r in runs)
    assert len(list((tmp_path / "multirun").glob("*/*/0"))) == 1  # Hydra's sweep folders
