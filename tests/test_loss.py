"""The training loss taken in chunks of positions (LM head + cross-entropy per chunk) equals the
full-logits computation, value and gradients, for both objectives and every attention law; the
compiled loss equals the eager one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ssmax.lit.lightning_module import LitLM
from ssmax.model import Transformer
from ssmax.model.factory import build_model, model_config, variant_config
from ssmax.model.loss import IGNORE, model_loss
from tests.conftest import VARIANTS, make_cfg

OBJECTIVES = ("pretrain", "sft")


def smoke_model(variant: str, dtype: torch.dtype = torch.float64) -> Transformer:
    cfg = make_cfg("preset=smoke", f"variant={variant}")
    torch.manual_seed(0)
    model = Transformer(model_config(cfg), variant_config(cfg), cfg.data.seq_len).to(dtype)
    with torch.no_grad():  # s, b, p_n away from their init so that every law's term matters
        for name, p in model.named_parameters():
            if name.endswith(("attn.s", "attn.b", "p_n")):
                p.uniform_(0.3, 1.5)
    return model


def batch(vocab: int, objective: str) -> tuple[torch.Tensor, torch.Tensor]:
    """ids [3, 40] and labels: every next token (pretrain), or answer spans of 5, 1 and 0 tokens
    (sft: a row with no answer at all counts in the mean over rows)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (3, 41), generator=g)
    labels = ids[:, 1:].clone()
    if objective == "sft":
        keep = torch.zeros_like(labels, dtype=torch.bool)
        keep[0, 30:35], keep[1, 39] = True, True
        labels[~keep] = IGNORE
    return ids[:, :-1], labels


def full_logits_loss(model: Transformer, ids: torch.Tensor, labels: torch.Tensor, objective: str):
    """The reference: the whole [B, T, vocab] logits, one cross-entropy."""
    total = F.cross_entropy(
        model(ids).flatten(0, 1), labels.flatten(), ignore_index=IGNORE, reduction="sum"
    )
    return total / (labels.shape[0] if objective == "sft" else (labels != IGNORE).sum())


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_chunked_loss_and_gradients_equal_the_full_logits(variant: str, objective: str) -> None:
    model = smoke_model(variant)
    ids, labels = batch(model.cfg.vocab_size, objective)
    params = [p for p in model.parameters() if p.requires_grad]
    want = full_logits_loss(model, ids, labels, objective)
    want_grads = torch.autograd.grad(want, params)
    for chunk in (7, 40, 10_000):  # a partial last chunk; one row per chunk; one chunk in all
        got = model_loss(model, ids, labels, objective, chunk=chunk)
        got_grads = torch.autograd.grad(got, params)
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        for name, g, w in zip([n for n, p in model.named_parameters() if p.requires_grad],
                              got_grads, want_grads, strict=True):  # fmt: skip
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12, msg=name)
    assert any(g.abs().sum() > 0 for g in want_grads)  # the reference has gradients at all


def lit(variant: str, objective: str, compile: bool) -> LitLM:
    cfg = make_cfg("preset=smoke", f"variant={variant}")
    torch.manual_seed(0)
    optim = dict(cfg.trainer[objective])
    return LitLM(build_model(cfg), objective, optim,
                 10, 1, compile=compile, loss_chunk=50)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variant", "objective"), [("b_ssmax", "pretrain"), ("d_ssmax_bias", "sft")]
)
@pytest.mark.usefixtures("own_inductor_cache")
def test_compiled_loss_equals_eager(variant: str, objective: str) -> None:
    """torch.compile (inductor, on the CPU here) of model + head + chunked cross-entropy gives
    the eager loss and gradients to float32 rounding (rtol 1e-5): fusion reorders sums."""
    eager, compiled = lit(variant, objective, False), lit(variant, objective, True)
    compiled.model.load_state_dict(eager.model.state_dict())
    ids, labels = batch(eager.model.cfg.vocab_size, objective)
    results = []
    for module in (eager, compiled):
        loss = module.train_loss(ids, labels)
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in module.model.named_parameters()}))
    (want, want_grads), (got, got_grads) = results
    assert compiled.train_loss is not compiled.loss  # it did run under torch.compile
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for name, grad in want_grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
