"""The captured attention row equals the last row of a naive full float64 attention matrix."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig

from ssmax.data.tokenizer import load_tokenizer
from ssmax.evals import scaled_rope_theta
from ssmax.evals.needle_score import (
    attention_rows,
    capture_last_attention,
    needle_score_map,
    needle_scores,
    top_needle_scores,
)
from ssmax.evals.niah import SCORES, greedy_decode
from ssmax.model import Transformer
from tests.conftest import VARIANTS, make_cfg
from tests.test_attention import (
    asentmax_factor_reference,
    gate_reference,
    nape_slope_reference,
    p_rope_frequencies_reference,
    sink_reference,
    term_reference,
    weights_reference,
)
from tests.test_evals_loss import tiny_model
from tests.test_rivals_own import yarn_frequencies_reference


def naive_attention(
    model: Transformer, ids: torch.Tensor
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Every layer's full [H, T, T] attention matrix and the final hidden states, written out:
    explicit RoPE angles, explicit n, explicit multiplier, explicit causal mask (issue 60:
    the evals' theta factor only where the variant takes it, YaRN's interpolation at s = T / N,
    n = T for every query under law_n pass, NAPE's unrotated heads and ALiBi slopes)."""
    t, h, d = ids.numel(), model.cfg.n_heads, model.head_dim
    var = model.variant
    pos = torch.arange(t, dtype=torch.float64)
    n = torch.full_like(pos, t) if var.law_n == "pass" else pos + 1
    theta = model.rope_theta if var.rope_scaled_at_eval else model.cfg.rope_theta
    angle = pos[:, None] * theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    if var.rope_fraction < 1:  # p-RoPE, its base scaled as theta is (issue 43)
        freqs = p_rope_frequencies_reference(var, d, theta / model.cfg.rope_theta)
        angle = pos[:, None] * torch.tensor(freqs, dtype=torch.float64)[None, :]
    if var.rope_scaling == "yarn_dynamic":  # YaRN's interpolation at this pass's s
        freqs = yarn_frequencies_reference(d, theta, max(1.0, t / model.train_len),
                                           model.train_len, ramp=var.yarn_ramp)  # fmt: skip
        angle = pos[:, None] * torch.tensor(freqs, dtype=torch.float64)[None, :]
    cos, sin = angle.cos(), angle.sin()

    def rope(x: torch.Tensor) -> torch.Tensor:  # pairs (x_j, x_{j+d/2}) rotated by angle_j
        if var.positions == "nape":  # NAPE rotates no head
            return x
        x1, x2 = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    mats, x = [], model.tok_emb(ids[None]).double()
    for block in model.layers:
        a = block.attn
        xn = block.attn_norm(x)
        q, k, v = (w(xn)[0].view(t, h, d).transpose(0, 1).double() for w in (a.wq, a.wk, a.wv))
        scale = a.variant.scale
        if scale == "none":
            m = torch.ones(h, t, dtype=torch.float64)
        elif scale == "asentmax":
            rows = [[asentmax_factor_reference(a.variant, a, xn[0, i].double(), head,
                                               int(n[i])) for i in range(t)]
                    for head in range(h)]  # fmt: skip
            m = torch.tensor(rows, dtype=torch.float64)
        else:
            pn = model.p_n.tolist() if scale == "p_n" else []
            term = torch.tensor(
                [term_reference(a.variant, pn, int(i), model.train_len) for i in n.tolist()],
                dtype=torch.float64,
            )
            m = a.s.double()[:, None] * term[None, :]
            if a.variant.bias:
                m = m + a.b.double()[:, None]
        scores = m[:, :, None] * (rope(q) @ rope(k).transpose(-1, -2)) / math.sqrt(d)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        attn = scores.masked_fill(~causal, float("-inf")).softmax(-1)  # [H, T, T]
        if a.general or a.variant.sink:  # a score law, a normaliser, NAPE, a sink (43, 60)
            attn = torch.stack([torch.stack([
                weights_reference(a.variant, scores[head, i], i, sink_reference(a, head),
                                  slope=nape_slope_reference(var, head, h))
                for i in range(t)]) for head in range(h)])  # fmt: skip
        mats.append(attn)
        y = (attn @ v).transpose(0, 1).reshape(1, t, h * d)
        y = gate_reference(a.variant, a, y[0], xn[0].double())[None]  # gated attention (issue 60)
        x = x + a.wo(y)
        x = x + block.ffn(block.ffn_norm(x))
    return mats, model.norm(x)


@pytest.mark.parametrize("variant", VARIANTS)
def test_row_matches_naive_attention(variant: str) -> None:
    row_matches_naive_attention(tiny_model(variant, 3))  # float64, s / b / p_n off their init


# issue 60's two sets in one variant (tests/test_new_arms.py, TOGETHER): NAPE's slopes and the
# sink in one row; the keys held before RoPE, rotated at the pass's frequencies, and the sink
@pytest.mark.parametrize("overrides", [
    ("l_asentmax_nape", "variant.sink=true", "variant.gate=elementwise"),
    ("p_adaptive_temp_inference", "variant.positions=nape", "variant.sink=true"),
    ("m_yarn_whole_dynamic_inference", "variant.sink=true", "variant.gate=elementwise"),
], ids=["l2_sink_gate", "p_nape_sink", "m3_sink_gate"])  # fmt: skip
def test_row_matches_naive_attention_with_both_sets_of_issue_60(overrides: tuple) -> None:
    name, *changes = overrides
    row_matches_naive_attention(tiny_model(name, 3, *changes))


def row_matches_naive_attention(model: Transformer) -> None:
    """The needle scores' rows of this model at theta x50 against naive_attention's."""
    model.rope_theta *= 50
    with torch.no_grad():  # larger q.k so that rows are far from uniform and errors show
        for block in model.layers:
            block.attn.wq.weight.mul_(6)
            block.attn.wk.weight.mul_(6)
    ids = torch.randint(0, model.cfg.vocab_size, (48,))
    mats, hidden = naive_attention(model, ids)
    with torch.no_grad():  # the reference forward is the model's own
        torch.testing.assert_close(hidden, model.hidden(ids[None]), rtol=1e-5, atol=1e-5)
    rows = attention_rows(model, ids.tolist())
    assert rows.shape == (2, 2, 48) and rows.dtype == torch.float64 and rows.max() > 2 / 48
    for layer, mat in enumerate(mats):  # the model rotates and scales q, k in float32
        torch.testing.assert_close(rows[layer], mat[:, -1], rtol=1e-5, atol=1e-6)
    span = (20, 27)
    want = torch.stack([mat[:, -1, 20:27].sum(-1) for mat in mats])
    torch.testing.assert_close(needle_scores(model, ids.tolist(), span), want, rtol=1e-5, atol=1e-6)
    # Without a cache the keys are recomputed from the layer input: same row
    with torch.no_grad(), capture_last_attention(model) as no_cache:
        model.hidden(ids[None])
    torch.testing.assert_close(torch.stack([no_cache[0], no_cache[1]]), rows)


def test_capture_keeps_the_prefill_row_while_decoding() -> None:
    model = tiny_model("b_ssmax", seed=4)
    ids = torch.randint(1, model.cfg.vocab_size, (30,)).tolist()
    with capture_last_attention(model) as rows:
        greedy_decode(model, ids, 4, eos_id=0)
    assert rows[0].shape == (2, 30)
    torch.testing.assert_close(torch.stack([rows[0], rows[1]]), attention_rows(model, ids))


@pytest.fixture(scope="module")
def data_cfg(shared_cache: Path) -> DictConfig:
    return make_cfg("preset=smoke", f"paths.cache_dir={shared_cache}").data


def test_fig7_and_fig8_entries(data_cfg: DictConfig) -> None:
    tokenizer = load_tokenizer(data_cfg)
    model = tiny_model("b_ssmax").float()
    with scaled_rope_theta(model, 50):
        grid = needle_score_map(model, tokenizer, data_cfg, context_tokens=200)
        trials = top_needle_scores(model, tokenizer, data_cfg, context_tokens=200, trials=3)
    assert grid.shape == (2, 2) and bool(((grid > 0) & (grid < 1)).all())
    assert len(trials) == 3
    for trial in trials:
        assert 0 < trial.top_score < 1 and trial.score in SCORES and 0 <= trial.depth <= 1
        assert 0 <= trial.layer < 2 and 0 <= trial.head < 2
