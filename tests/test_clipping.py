"""Gradient clipping with the fused AdamW that CUDA training uses, under bf16-mixed: Lightning's
mixed-precision plugin refuses to clip for a fused optimizer ("does not allow for gradient
clipping"), which stopped every GPU run at its first step. Run here on the CPU, where torch
has a fused AdamW too and Lightning's bf16-mixed takes the same plugin."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from ssmax.lit.lightning_module import LitLM
from ssmax.model.factory import build_model
from tests.conftest import make_cfg

STEPS, CLIP = 3, 1e-2  # a clip far under the smoke model's gradient norm: it acts every step


class Batches(Dataset):
    def __init__(self, vocab: int, seq_len: int) -> None:
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, vocab, (STEPS, 4, seq_len + 1), generator=g)

    def __len__(self) -> int:
        return STEPS

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i, :, :-1], "labels": self.ids[i, :, 1:]}


def trained(fused: bool, clip: float | None) -> dict[str, torch.Tensor]:
    cfg = make_cfg("preset=smoke", "variant=b_ssmax")
    torch.manual_seed(0)
    module = LitLM(build_model(cfg), "pretrain",
                   dict(cfg.trainer.pretrain), STEPS, 0)  # fmt: skip
    module.FUSED_ADAMW = fused
    trainer = L.Trainer(
        accelerator="cpu", devices=1, precision="bf16-mixed", max_steps=STEPS,
        gradient_clip_val=clip, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    data = DataLoader(Batches(cfg.data.vocab_size, cfg.data.seq_len), batch_size=None)
    trainer.fit(module, data)
    assert getattr(trainer.optimizers[0], "_step_supports_amp_scaling", False) is fused
    return {n: p.detach().clone() for n, p in module.model.named_parameters()}


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max((a[n] - b[n]).abs().max().item() for n in a)


@pytest.mark.slow
def test_fused_adamw_clips_under_bf16_mixed_as_lightning_clips_unfused() -> None:
    fused = trained(fused=True, clip=CLIP)
    unfused = trained(fused=False, clip=CLIP)  # Lightning's own clipping path
    unclipped = trained(fused=True, clip=None)
    # AdamW is near scale-invariant, yet a clip factor that changes from step to step moves its
    # moments: the weights tell clipped from unclipped far beyond fused-vs-foreach rounding
    gap, apart = max_diff(fused, unfused), max_diff(fused, unclipped)
    assert gap < apart / 5, (gap, apart)
