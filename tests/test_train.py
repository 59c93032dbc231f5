"""A real smoke training run per variant, logged to a real MLflow sqlite store."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from ssmax.model import inv_mean_log_n
from ssmax.preflight.weights import read_weights
from ssmax.tracking.store import tracking_uri
from ssmax.train import train_config
from tests.conftest import make_cfg

SCRATCH = ["a_softmax", "b_ssmax", "c_ssmax_no_scale", "d_ssmax_bias", "pn_rationale"]


def smoke_cfg(out: Path, cache: Path, variant: str, *extra: str):  # noqa: ANN201
    return make_cfg(
        "preset=smoke",
        f"variant={variant}",
        f"paths.output_dir={out}",
        f"paths.cache_dir={cache}",
        *extra,
    )


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("train")


@pytest.fixture(scope="module")
def softmax_weights(out_dir: Path, shared_cache: Path) -> Path:
    return train_config(smoke_cfg(out_dir, shared_cache, "a_softmax")).weights


def run_of(cfg, variant: str):  # noqa: ANN001, ANN201
    client = MlflowClient(tracking_uri(cfg))
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    runs = client.search_runs([exp.experiment_id], f"tags.variant = '{variant}'")
    assert len(runs) == 1
    return client, runs[0]


@pytest.mark.parametrize("variant", SCRATCH)
def test_pretrain_logs_to_mlflow(
    variant: str, out_dir: Path, shared_cache: Path, softmax_weights: Path
) -> None:
    cfg = smoke_cfg(out_dir, shared_cache, variant)
    weights = softmax_weights if variant == "a_softmax" else train_config(cfg).weights
    assert weights.exists()
    client, run = run_of(cfg, variant)
    assert run.info.status == "FINISHED"
    assert run.data.params["model.dim"] == "32" and run.data.params["variant.name"] == variant
    assert "paths.output_dir" not in run.data.params  # volatile values stay out of params
    assert run.data.tags["preset"] == "smoke" and run.data.tags["git_commit"]
    loss = client.get_metric_history(run.info.run_id, "train/loss")
    assert len(loss) >= 5 and loss[-1].value < loss[0].value
    for metric in ("train/lr", "train/tokens_seen", "train/tokens_per_s", "val/loss"):
        assert client.get_metric_history(run.info.run_id, metric), metric
    seen = client.get_metric_history(run.info.run_id, "train/tokens_seen")
    assert seen[-1].value == (seen[-1].step + 1) * 4 * 64  # steps done x batch x seq_len
    has_s = variant != "a_softmax" and variant != "c_ssmax_no_scale"
    assert ("attn/s_mean/layer_00" in run.data.metrics) == has_s
    has_b = variant in ("d_ssmax_bias", "pn_rationale")
    assert ("attn/b_max/layer_01" in run.data.metrics) == has_b
    assert ("attn/p_n_mean" in run.data.metrics) == (variant == "pn_rationale")
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["config.yaml"]


def test_swap_after_pretrain_needs_softmax_weights(out_dir: Path, shared_cache: Path) -> None:
    from ssmax.config.compose import ConfigError

    with pytest.raises(ConfigError, match="set init_from="):
        train_config(smoke_cfg(out_dir, shared_cache, "e_swap_after_pretrain"))


def test_swap_after_pretrain_converts_without_training(
    out_dir: Path, shared_cache: Path, softmax_weights: Path
) -> None:
    cfg = smoke_cfg(
        out_dir,
        shared_cache,
        "e_swap_after_pretrain",
        f"init_from={softmax_weights}",
        "trainer.pretrain.max_steps=0",
    )
    swapped = read_weights(train_config(cfg).weights)
    original = read_weights(softmax_weights)
    assert all(torch.equal(swapped[k], v) for k, v in original.items())
    assert torch.allclose(swapped["layers.0.attn.s"], torch.tensor(inv_mean_log_n(64)))
    _, run = run_of(cfg, "e_swap_after_pretrain")
    assert "val/loss" in run.data.metrics


def test_switch_during_pretrain_trains_from_softmax_checkpoint(
    out_dir: Path, shared_cache: Path, softmax_weights: Path
) -> None:
    ckpt = softmax_weights.parent / "checkpoints" / "last.ckpt"
    cfg = smoke_cfg(
        out_dir,
        shared_cache,
        "f_switch_during_pretrain",
        f"init_from={ckpt}",
        "trainer.pretrain.max_steps=6",
        "trainer.pretrain.warmup_steps=4",
    )
    switched = read_weights(train_config(cfg).weights)
    s = switched["layers.1.attn.s"]
    assert not torch.allclose(s, torch.tensor(inv_mean_log_n(64)))  # s was trained
    client, run = run_of(cfg, "f_switch_during_pretrain")
    lr = client.get_metric_history(run.info.run_id, "train/lr")
    assert lr[0].step == 0  # a fresh warmup: step 0 of 4 runs at a quarter of the LR
    assert lr[0].value == pytest.approx(cfg.trainer.pretrain.lr / 4)


def test_sft_from_pretrained_weights(
    out_dir: Path, shared_cache: Path, softmax_weights: Path
) -> None:
    cfg = smoke_cfg(
        out_dir, shared_cache, "b_ssmax", "objective=sft", f"init_from={softmax_weights}"
    )
    weights = train_config(cfg).weights
    assert weights.parent.name == "b_ssmax-sft-seed0"
    client = MlflowClient(tracking_uri(cfg))
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    (run,) = client.search_runs([exp.experiment_id], "tags.objective = 'sft'")
    lr = [m.value for m in client.get_metric_history(run.info.run_id, "train/lr")]
    assert max(lr) == pytest.approx(cfg.trainer.sft.lr, rel=0.05)  # warmed up to the peak
    assert lr[0] < max(lr) and lr[-1] < max(lr)  # warmup, then cosine decay
    assert run.data.metrics["train/loss"] > 0


def test_result_carries_final_losses(out_dir: Path, shared_cache: Path) -> None:
    result = train_config(smoke_cfg(out_dir, shared_cache, "c_ssmax_no_scale", "seed=3"))
    assert result.metrics["train/loss"] > 0 and result.metrics["val/loss"] > 0


def test_progress_bar_is_described_by_steps() -> None:
    import lightning as L

    from ssmax.lit.progress import StepProgressBar

    bar = StepProgressBar()
    trainer = L.Trainer(max_steps=1500, max_epochs=-1, callbacks=[bar], logger=False)
    bar.setup(trainer, None, "fit")
    assert bar._get_train_description(0) == "train, 1,500 steps"  # Lightning's: "Epoch 0/-2"


def test_progress_is_rich_on_a_terminal_and_lines_in_a_log(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import os
    import pty
    import sys

    from ssmax.lit.progress import ProgressLines, StepProgressBar, progress_bar

    master, replica = pty.openpty()
    with os.fdopen(replica, "w") as terminal:
        monkeypatch.setattr(sys, "stdout", terminal)
        assert isinstance(progress_bar(60.0), StepProgressBar)
    os.close(master)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert isinstance(progress_bar(60.0), ProgressLines)


def test_a_log_gets_progress_lines_to_the_last_step(
    out_dir: Path, shared_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = smoke_cfg(
        out_dir,
        shared_cache,
        "a_softmax",
        "seed=5",
        "trainer.progress_bar=true",
        "trainer.progress_every_s=1e-9",
    )
    train_config(cfg)
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("train step ")]
    total = cfg.trainer.pretrain.max_steps
    assert [int(x.split()[2].split("/")[0]) for x in lines] == list(range(1, total + 1))
    assert lines[-1].startswith(f"train step {total}/{total} (100%) · loss ")
    assert "left" not in lines[-1] and all("left" in x for x in lines[:-1])
