"""Training faults on a real smoke run: a NaN loss stops it at that step (last good checkpoint
kept, no weights, MLflow run FAILED) and a re-run resumes to the weights of a run that never
failed; a last.ckpt that does not load is set aside and training starts afresh. Each training
run logs its data as MLflow dataset inputs and the git commit as its source version."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from ssmax.lit.guards import TrainingDiverged
from ssmax.lit.trainer import RUN_ID_FILE
from ssmax.tracking.datasets import dataset_inputs
from ssmax.tracking.store import tracking_uri
from ssmax.train import train_config
from tests.conftest import make_cfg

POISON = "trainer.callbacks=[{_target_:tests.faults.PoisonAt,step:15}]"


def cfg_for(out: Path, cache: Path, *extra: str):  # noqa: ANN201
    return make_cfg(
        "preset=smoke", f"paths.output_dir={out}", f"paths.cache_dir={cache}",
        "trainer.deterministic=true", *extra,
    )  # fmt: skip


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path):  # noqa: ANN201
    """A smoke run that never failed: (its config, its final weights)."""
    cfg = cfg_for(tmp_path_factory.mktemp("reference"), shared_cache)
    return cfg, weights(train_config(cfg).weights)


def run_of(cfg):  # noqa: ANN001, ANN201
    client = MlflowClient(tracking_uri(cfg))
    run_id = (Path(cfg.paths.run_dir) / RUN_ID_FILE).read_text().strip()
    return client, client.get_run(run_id)


def test_nan_loss_stops_at_its_step_and_a_rerun_resumes(
    tmp_path: Path, shared_cache: Path, reference
) -> None:  # noqa: ANN001
    ref_cfg, ref_weights = reference
    with pytest.raises(TrainingDiverged) as err:
        train_config(cfg_for(tmp_path, shared_cache, POISON))
    message = str(err.value)
    assert "\n" not in message and "training loss is nan at step 16" in message
    cfg = cfg_for(tmp_path, shared_cache)
    run_dir = Path(cfg.paths.run_dir)
    assert "last good checkpoint stays" in message and str(run_dir) in message
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == 10  # checkpoint_every_n_steps: the last good one
    assert not (run_dir / "model.pt").exists()
    client, run = run_of(cfg)
    assert run.info.status == "FAILED"
    losses = [m.value for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert losses and all(v == v for v in losses)  # the NaN step was never logged

    result = train_config(cfg)  # no poison: resumes from step 10
    assert same(weights(result.weights), ref_weights)
    client, run = run_of(cfg)
    assert run.info.status == "FINISHED" and result.run_id == run.info.run_id
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    ref_client, ref_run = run_of(ref_cfg)
    ref_steps = [m.step for m in ref_client.get_metric_history(ref_run.info.run_id, "train/loss")]
    assert (
        steps == sorted(set(steps)) == ref_steps
    )  # each step once, as in the run that never failed


def test_corrupt_last_checkpoint_is_set_aside(
    tmp_path: Path, shared_cache: Path, reference, capfd: pytest.CaptureFixture[str]
) -> None:  # noqa: ANN001
    _, ref_weights = reference
    cfg = cfg_for(tmp_path, shared_cache)
    train_config(cfg)
    run_dir = Path(cfg.paths.run_dir)
    last = run_dir / "checkpoints" / "last.ckpt"
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 3])  # truncated
    (run_dir / "model.pt").unlink()
    capfd.readouterr()

    result = train_config(cfg)
    warnings = [line for line in capfd.readouterr().err.splitlines() if "does not load" in line]
    assert len(warnings) == 1 and "set aside as last.ckpt.corrupt-" in warnings[0]
    assert "starts from scratch" in warnings[0]
    (aside,) = last.parent.glob("last.ckpt.corrupt-*")
    assert aside.stat().st_size == len(data) // 3
    assert same(weights(result.weights), ref_weights)  # as if it had never been corrupted
    assert torch.load(last, weights_only=False)["global_step"] == 20


def test_runs_log_their_data_and_source_version(reference, tmp_path: Path) -> None:  # noqa: ANN001
    cfg, _ = reference
    client, run = run_of(cfg)
    assert run.data.tags["mlflow.source.git.commit"] == run.data.tags["git_commit"] != ""
    inputs = {i.dataset.name: i for i in run.inputs.dataset_inputs}
    assert set(inputs) == {"austen-train", "austen-validation"}
    train_input = inputs["austen-train"]
    tags = {t.key: t.value for t in train_input.tags}
    assert tags == {"mlflow.data.context": "training", "split": "train"}
    assert "austen.jsonl.xz" in train_input.dataset.source and train_input.dataset.digest
    assert train_input.dataset.digest != inputs["austen-validation"].dataset.digest

    def digests(*extra: str) -> list[str]:
        other = cfg_for(tmp_path, tmp_path, *extra)
        return [i.dataset.digest for i in dataset_inputs(other)]

    assert digests() == [inputs[f"austen-{s}"].dataset.digest for s in ("train", "validation")]
    assert digests("data.seq_len=32") != digests()  # other data, another digest
    sft = cfg_for(tmp_path, tmp_path, "objective=sft")
    assert [i.dataset.name for i in dataset_inputs(sft)] == [
        "squad-generated-train", "squad-generated-validation"
    ]  # fmt: skip


def test_failed_node_keeps_its_folder_only_to_resume(tmp_path: Path) -> None:
    from ssmax.pipeline.run import discard_unresumable

    nothing, resumable = tmp_path / "nothing", tmp_path / "resumable"
    for folder in (nothing, resumable):
        (folder / "checkpoints").mkdir(parents=True)
        (folder / "config.yaml").write_text("seed: 0\n")
    (resumable / "checkpoints" / "last.ckpt").write_bytes(b"a checkpoint")
    discard_unresumable(nothing)
    discard_unresumable(resumable)
    assert not nothing.exists()  # `plan` shows the node to-run, not partial
    assert (resumable / "checkpoints" / "last.ckpt").exists()
