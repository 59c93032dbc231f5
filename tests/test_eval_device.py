"""The evals run where trainer.accelerator says: a GPU asked for is used or refused in one
line (never a silent CPU run), and the CPU path gives the numbers it gave before (up to fp32
rounding since the loss is taken over [rows, vocab] instead of [batch, vocab, positions])."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ssmax.config.compose import ConfigError
from ssmax.evals.needle_score import attention_rows
from ssmax.evals.niah import greedy_decode
from ssmax.evals.per_position_loss import per_position_loss
from ssmax.model import Transformer
from ssmax.model.factory import model_config, variant_config
from ssmax.stages import context
from ssmax.stages.context import load_model
from tests.conftest import make_cfg

CUDA = torch.cuda.is_available()


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    cfg = make_cfg("preset=smoke", "variant=b_ssmax")
    torch.manual_seed(0)
    path = tmp_path / "model.pt"
    torch.save(Transformer(model_config(cfg), variant_config(cfg), 64).state_dict(), path)
    return path


@pytest.mark.skipif(CUDA, reason="checks the refusal on a machine without a GPU")
@pytest.mark.parametrize("accelerator", ["gpu", "cuda"])
def test_gpu_asked_for_and_missing_is_refused(weights: Path, accelerator: str) -> None:
    cfg = make_cfg("preset=smoke", "variant=b_ssmax", f"trainer.accelerator={accelerator}")
    with pytest.raises(ConfigError) as err:
        load_model(cfg, str(weights))
    assert f"trainer.accelerator={accelerator}" in str(err.value) and "\n" not in str(err.value)


def test_unknown_accelerator_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"trainer.accelerator='tpu'; allowed: \('auto'"):
        context.eval_device(make_cfg("preset=smoke", "trainer.accelerator=tpu"))


def _loss_as_before(model: Transformer, sequences: torch.Tensor, chunk: int) -> torch.Tensor:
    """per_position_loss as it was before the device change (CPU, no autocast), kept here
    as the reference the CPU path must still equal to fp32 rounding."""
    length = sequences.shape[1]
    total = torch.zeros(length - 1, dtype=torch.float64)
    with torch.no_grad():
        for ids in sequences.split(1):
            hidden = model.hidden(ids[:, :-1])
            for a in range(0, length - 1, chunk):
                b = min(a + chunk, length - 1)
                logits = model.lm_head(hidden[:, a:b]).float()
                loss = F.cross_entropy(
                    logits.transpose(1, 2), ids[:, a + 1 : b + 1], reduction="none"
                )
                total[a:b] += loss.double().sum(0)
    return total / len(sequences)


@pytest.mark.skipif(CUDA, reason="the CPU path")
def test_cpu_path_is_unchanged(weights: Path) -> None:
    cfg = make_cfg("preset=smoke", "variant=b_ssmax")  # trainer.accelerator=auto
    model = load_model(cfg, str(weights))
    param = next(model.parameters())
    assert param.device.type == "cpu" and param.dtype == torch.float32
    seqs = torch.randint(
        0, model.cfg.vocab_size, (3, 150), generator=torch.Generator().manual_seed(1)
    )
    got, before = per_position_loss(model, seqs, chunk=50), _loss_as_before(model, seqs, 50)
    torch.testing.assert_close(got, before, rtol=1e-6, atol=0)  # measured: 1.0e-7 at most


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_evals_on_the_gpu_in_bf16(weights: Path) -> None:
    """On a GPU: the model lives there, the loss under bf16 autocast is close to fp32 on the
    CPU, the needle-score rows stay float64 and sum to 1, decoding runs."""
    cfg = make_cfg("preset=smoke", "variant=b_ssmax")
    model = load_model(cfg, str(weights))
    assert next(model.parameters()).device.type == "cuda"
    seqs = torch.randint(
        0, model.cfg.vocab_size, (2, 300), generator=torch.Generator().manual_seed(1)
    )
    gpu = per_position_loss(model, seqs, chunk=64)
    cpu = per_position_loss(model.cpu(), seqs, chunk=64)
    model.cuda()
    assert (gpu - cpu).abs().mean() < 0.05
    rows = attention_rows(model, seqs[0, :200].tolist())
    assert rows.dtype == torch.float64
    torch.testing.assert_close(rows.sum(-1).cpu(), torch.ones(rows.shape[:2], dtype=torch.float64))
    assert len(greedy_decode(model, seqs[0, :100].tolist(), 4, eos_id=0)) == 4


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_a_decoding_step_never_waits_for_the_gpu(weights: Path) -> None:
    """An eager decoding step queues its kernels without a host-device sync, so the CPU runs
    ahead of the GPU (a RoPE table copied from the host made every step wait)."""
    model = load_model(make_cfg("preset=smoke", "variant=b_ssmax"), str(weights))
    ids = torch.randint(1, model.cfg.vocab_size, (2, 40), device="cuda")
    cache = model.new_cache(2, 42, torch.bfloat16)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        model.hidden(ids, cache)
        torch.cuda.set_sync_debug_mode("error")
        try:
            model.hidden(ids[:, :1], cache)
        finally:
            torch.cuda.set_sync_debug_mode("default")
