"""The copy probe: its index arithmetic against an exact copier, and ~0 for a model that
cannot copy."""

import math

import pytest
import torch

from ssmax.config.compose import compose
from ssmax.evals.copying import copy_gain
from ssmax.model import Transformer
from ssmax.model.factory import model_config, variant_config

VOCAB, EOS, SPAN = 64, 0, 8


class Probe(torch.nn.Module):
    """The interface the per-position loss uses: hidden states, then lm_head's weight (here
    the identity matrix, so hidden() returns the logits)."""

    def __init__(self) -> None:
        super().__init__()
        self.lm_head = torch.nn.Linear(VOCAB, VOCAB, bias=False)
        torch.nn.init.eye_(self.lm_head.weight)
        self.anchor = torch.nn.Parameter(torch.zeros(()))  # where the model lives (CPU)


class Copier(Probe):
    """Predicts x[t + 1] = x[t + 1 - SPAN] exactly where that is defined, uniform elsewhere:
    what a perfect induction head does on a span shown twice."""

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*x.shape, VOCAB)
        t = torch.arange(x.shape[1])
        source = t + 1 - SPAN  # the earlier position holding the next token
        ok = source >= 1
        logits[:, ok] = 100.0 * torch.nn.functional.one_hot(x[:, source[ok]], VOCAB).float()
        return logits


def test_exact_copier_gains_log_vocab():
    out = copy_gain(Copier(), VOCAB, EOS, SPAN, count=4)
    assert out["first"] == pytest.approx(math.log(VOCAB), abs=1e-5)  # nothing to copy yet
    assert out["repeat"] == pytest.approx(0.0, abs=1e-5)  # every scored target copied
    assert out["gain"] == pytest.approx(math.log(VOCAB), abs=1e-5)


def test_untrained_model_gains_nothing(tmp_path):
    cfg = compose("preset=smoke", f"paths.output_dir={tmp_path}")
    torch.manual_seed(0)
    model = Transformer(model_config(cfg), variant_config(cfg), cfg.data.seq_len).eval()
    out = copy_gain(model, cfg.data.vocab_size, EOS, span=16, count=8)
    assert out["first"] == pytest.approx(math.log(cfg.data.vocab_size), abs=0.1)
    assert abs(out["gain"]) < 0.05


def test_never_samples_eos_and_rejects_bad_sizes():
    seen = []

    class Spy(Probe):
        def hidden(self, x):
            seen.append(x)
            return torch.zeros(*x.shape, VOCAB)

    copy_gain(Spy(), VOCAB, eos_id=5, span=SPAN, count=200)
    assert not (seen[0] == 5).any() and seen[0].max() < VOCAB
    with pytest.raises(ValueError, match="span must be >= 2"):
        copy_gain(Spy(), VOCAB, EOS, span=1, count=1)
