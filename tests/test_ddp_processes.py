"""Several processes per node (DDP over devices x num_nodes): the global batch splits over all
of them, and only global rank 0 writes the node's folder, MLflow runs and done-marker."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.fabric.utilities.rank_zero import rank_zero_only

from ssmax.config.compose import ConfigError
from ssmax.pipeline.run import execute_node, plan
from ssmax.preflight.settings import validate
from tests.conftest import make_cfg


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer.num_nodes=0"], "trainer.num_nodes=0 must be > 0"),  # an integer: the schema
        (["trainer.num_nodes=3"], "global_batch=4 must be a multiple of batch_size x devices x "
         "num_nodes = 4 x 1 x 3 = 12"),
        (["trainer.devices=2", "trainer.num_nodes=2", "trainer.pretrain.global_batch=8"],
         "global_batch=8 must be a multiple of batch_size x devices x num_nodes = 4 x 2 x 2"),
    ],
)  # fmt: skip
def test_global_batch_must_split_over_devices_and_nodes(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate(make_cfg("preset=smoke", *overrides))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_global_batch_that_splits_passes() -> None:
    split = ["trainer.devices=2", "trainer.num_nodes=2", "trainer.pretrain.global_batch=32"]
    validate(make_cfg("preset=smoke", *split, "trainer.sft.global_batch=16"))


@pytest.mark.slow
def test_only_global_rank_zero_writes(
    tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides = ["preset=smoke", "pipeline.variants=[a_softmax]", "trainer.pretrain.max_steps=4",
                 f"paths.output_dir={tmp_path}", f"paths.cache_dir={shared_cache}"]  # fmt: skip
    _, jobs = plan(overrides)
    (job,) = [j for j in jobs if j.stage == "pretrain"]
    folder = Path(job.dir)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("SLURM_PROCID", "1")  # the second task of a SLURM job
    monkeypatch.setattr(rank_zero_only, "rank", 1)  # what Lightning reads from it at import
    record = execute_node(job)
    assert record["outputs"]["weights"] == str(folder / "model.pt")
    written = ["done.json", "config.yaml", "model.pt", "mlflow_run_id"]
    assert not any((folder / name).exists() for name in written)
    assert not (tmp_path / "mlflow.db").exists()  # no MLflow run, not even the store

    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    execute_node(job)
    assert all((folder / name).exists() for name in written)
    assert job.done is not None
