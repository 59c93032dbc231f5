"""Per-position loss equals the naive full-logits cross-entropy, for every variant."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ssmax.evals import scaled_rope_theta
from ssmax.evals.inference import SDPA_FIRST, prefetch, sdpa_first
from ssmax.evals.per_position_loss import loss_at_multiples, per_position_loss
from ssmax.model import Transformer
from ssmax.model.factory import model_config, variant_config
from ssmax.report.plotting import smooth
from tests.conftest import VARIANTS, make_cfg


def tiny_model(variant: str, seed: int = 0, *overrides: str) -> Transformer:
    cfg = make_cfg("preset=smoke", f"variant={variant}", *overrides)
    torch.manual_seed(seed)
    model = Transformer(model_config(cfg), variant_config(cfg), cfg.data.seq_len).double()
    with torch.no_grad():  # non-init s, b, p_n so that every variant's multiplier matters
        for name, p in model.named_parameters():
            if name.endswith(("attn.s", "attn.b", "p_n", "attn.sink")):
                p.uniform_(0.3, 1.5)
    return model.eval()


@pytest.mark.parametrize("variant", VARIANTS)
def test_matches_naive_cross_entropy(variant: str) -> None:
    model = tiny_model(variant)
    seqs = torch.randint(0, model.cfg.vocab_size, (3, 40))
    with scaled_rope_theta(model, 50.0), torch.no_grad():
        got = per_position_loss(model, seqs, chunk=7, batch_size=2)
        logits = model(seqs[:, :-1])
    naive = F.cross_entropy(logits.transpose(1, 2), seqs[:, 1:], reduction="none").mean(0)
    assert got.dtype == torch.float64 and got.shape == (39,)
    torch.testing.assert_close(got, naive, rtol=1e-10, atol=1e-10)
    assert model.rope_theta == model.cfg.rope_theta  # restored


@pytest.mark.parametrize("variant", ["a_softmax", "b_ssmax", "pn_rationale"])
def test_batched_and_streamed_equal_one_at_a_time(variant: str) -> None:
    """Batches of 2 and 5 (the last one short), rows streamed from an iterator, and auto all
    give batch 1's numbers; a chunk smaller than the batch still takes one position at a time."""
    model = tiny_model(variant, seed=3)
    seqs = torch.randint(0, model.cfg.vocab_size, (5, 150))  # 150 > 2x the training length
    with scaled_rope_theta(model, 50.0):
        one = per_position_loss(model, seqs, chunk=64, batch_size=1)
        for got in (
            per_position_loss(model, seqs, chunk=64, batch_size=2),
            per_position_loss(model, seqs, chunk=3, batch_size=5),
            per_position_loss(model, iter(list(seqs)), chunk=64, batch_size=2),
            per_position_loss(model, seqs, batch_size="auto"),
        ):
            torch.testing.assert_close(got, one, rtol=1e-12, atol=1e-12)


@pytest.mark.slow  # inductor compiles the forward on the CPU: ~20 s
@pytest.mark.usefixtures("own_inductor_cache")
def test_compiled_equals_eager() -> None:
    """trainer.compile's eval path (model, head and loss under torch.compile) gives the eager
    numbers to float32 rounding, batches of 2 then a short one of 1 included."""
    model = tiny_model("b_ssmax", seed=6).float()
    seqs = torch.randint(0, model.cfg.vocab_size, (3, 150))
    with scaled_rope_theta(model, 50.0):
        eager = per_position_loss(model, seqs, chunk=64, batch_size=2)
        compiled = per_position_loss(model, seqs, chunk=64, batch_size=2, compile=True)
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)


def test_rejects_rows_too_short() -> None:
    with pytest.raises(ValueError, match="L >= 2"):
        per_position_loss(tiny_model("a_softmax"), torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="L >= 2"):
        per_position_loss(tiny_model("a_softmax"), iter([]))


def test_summaries() -> None:
    losses = torch.arange(20, dtype=torch.float64)  # context length c = index + 1
    assert loss_at_multiples(losses, 4, (1, 2, 5, 6)) == {1: 1.5, 2: 5.5, 5: 17.5}
    sm = smooth(losses.numpy(), 3)
    assert sm[0] == 0.5 and sm[5] == 5.0 and sm[-1] == 18.5
    grows = smooth(losses.numpy() ** 2, np.arange(1, 21) // 4)  # width (index + 1) // 4, at least 1
    assert grows[0] == 0 and grows[3] == 9 and grows[4] == 16 and grows[7] == (36 + 49) / 2
    assert grows[19] == np.mean(np.arange(17, 20) ** 2)  # width 5 at the end: 17..19


@pytest.mark.parametrize("first", SDPA_FIRST)
def test_any_sdpa_backend_first_gives_the_same_losses(first: str) -> None:
    """eval.sdpa_first: every choice runs (one the device lacks, cuDNN or the memory-efficient
    kernel on a CPU, is passed over) and gives the default order's losses."""
    model = tiny_model("b_ssmax").float()
    seqs = torch.randint(0, model.cfg.vocab_size, (2, 60))
    with torch.no_grad():
        want = per_position_loss(model, seqs)
        with sdpa_first(first):
            got = per_position_loss(model, seqs)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    bad = pytest.raises(ValueError, match="eval.sdpa_first='fast': expected one of torch, flash")
    with bad, sdpa_first("fast"):
        pass


def test_prefetch_stops_its_thread_when_the_consumer_stops() -> None:
    """A consumer that stops early (an error in an eval, a break) leaves no thread waiting on
    a full queue: the source is closed, its finally-clauses run."""
    closed = threading.Event()

    def source() -> Iterator[int]:
        try:
            yield from range(1000)
        finally:
            closed.set()

    items = prefetch(source(), depth=2)
    assert next(items) == 0
    items.close()  # what a for loop's break or an exception does to the generator
    assert closed.wait(timeout=30)
    assert list(prefetch(iter(range(5)), depth=2)) == [0, 1, 2, 3, 4]
    with pytest.raises(ZeroDivisionError):
        list(prefetch(1 // x for x in (1, 0)))
