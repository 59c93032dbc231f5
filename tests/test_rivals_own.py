"""Issue 60: each rival law as its own paper runs it (docs/rival-laws.md), against float64
references written from the papers and their code: YaRN's interpolation (Sec. 3.2) and dynamic
scaling (Sec. 3.3-3.4) against the paper's formula and transformers' _compute_yarn_parameters;
one s = L / N for every query of a pass and the step's length when decoding; NAPE as
deep-spin/asentmax writes it; (k)'s RoPE left as trained at the evals; and the settings that
cannot go together, refused in one line."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from ssmax.config.compose import ConfigError, compose
from ssmax.evals import scaled_rope_theta
from ssmax.model import ModelConfig, Transformer, VariantConfig, laws, positions
from ssmax.preflight.settings import validate
from tests.test_attention import rotate_reference, variant

DYNAMIC = ["m_yarn_temp_per_pass_inference", "m_yarn_whole_dynamic_inference"]


def yarn_frequencies_reference(head_dim: int, theta: float, s: float, train_len: int,
                               beta_fast: float = 32.0, beta_slow: float = 1.0,
                               ramp: str = "index") -> list[float]:  # fmt: skip
    """YaRN's NTK-by-parts frequency of each pair, loop by loop, float64 (Peng et al. 2023,
    Sec. 3.2): h(theta_j) = (1 - gamma) theta_j / s + gamma theta_j. ratio: the paper's ramp,
    gamma(r) = 0 if r < alpha, 1 if r > beta, else (r - alpha) / (beta - alpha), r = N / lambda_j,
    lambda_j = 2 pi / theta_j. index: the authors' code (jquesnelle/yarn find_correction_range,
    linear_ramp_mask), a ramp over the pair index between the pairs where r = beta and alpha."""
    if ramp == "index":

        def pair(rotations: float) -> float:
            return (
                head_dim * math.log(train_len / (rotations * 2 * math.pi)) / (2 * math.log(theta))
            )

        lo, hi = max(math.floor(pair(beta_fast)), 0), min(math.ceil(pair(beta_slow)), head_dim - 1)
        hi = hi + 0.001 if lo == hi else hi
    out = []
    for j in range(head_dim // 2):
        theta_j = theta ** (-2 * j / head_dim)
        if ramp == "index":
            gamma = 1 - min(max((j - lo) / (hi - lo), 0.0), 1.0)
        else:
            r = train_len / (2 * math.pi / theta_j)
            gamma = 0.0 if r < beta_slow else 1.0 if r > beta_fast else (
                (r - beta_slow) / (beta_fast - beta_slow))  # fmt: skip
        out.append((1 - gamma) * theta_j / s + gamma * theta_j)
    return out


# ------------------------------------------------------------------ YaRN's frequencies
@pytest.mark.parametrize(("head_dim", "train_len", "s"),
                         [(16, 128, 1.0), (16, 128, 5.0), (16, 128, 20.0), (64, 1024, 20.0),
                          (32, 64, 2.5), (128, 4096, 16.0)])  # fmt: skip
def test_yarn_index_ramp_and_temperature_are_transformers(head_dim: int, train_len: int,
                                                          s: float) -> None:  # fmt: skip
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import _compute_yarn_parameters

    config = transformers.LlamaConfig(
        hidden_size=2 * head_dim, num_attention_heads=2, max_position_embeddings=int(s * train_len),
        rope_parameters={"rope_type": "yarn", "rope_theta": 10_000.0, "factor": s,
                         "original_max_position_embeddings": train_len},
    )  # fmt: skip
    theirs, attention_factor = _compute_yarn_parameters(config)
    ours = positions.yarn_frequencies(head_dim, 10_000.0, scale=s, train_len=train_len)
    torch.testing.assert_close(ours.float(), theirs, rtol=1e-6, atol=0)
    loop = yarn_frequencies_reference(head_dim, 10_000.0, s, train_len)
    torch.testing.assert_close(ours, torch.tensor(loop, dtype=torch.float64), rtol=1e-12, atol=0)
    # their attention_factor scales cos and sin, so q and k: the logits by its square, which is
    # the yarn law's term at n = s N (mscale_power 2)
    term = laws.length_term("yarn", torch.tensor([s * train_len]), train_len=train_len,
                            mscale_power=2.0)  # fmt: skip
    assert term.item() == pytest.approx(attention_factor**2, rel=1e-6)


def test_yarn_ratio_ramp_is_the_papers_and_s_1_is_rope() -> None:
    for head_dim, train_len, s in ((16, 128, 5.0), (64, 1024, 20.0), (128, 4096, 8.0)):
        ours = positions.yarn_frequencies(
            head_dim, 1e4, scale=s, train_len=train_len, yarn_ramp="ratio"
        )
        want = yarn_frequencies_reference(head_dim, 1e4, s, train_len, ramp="ratio")
        torch.testing.assert_close(
            ours, torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=0
        )
        for ramp in positions.YARN_RAMPS:
            plain = positions.yarn_frequencies(head_dim, 1e4, scale=1.0, train_len=train_len,
                                               yarn_ramp=ramp)  # fmt: skip
            j = torch.arange(head_dim // 2, dtype=torch.float64)
            torch.testing.assert_close(plain, 1e4 ** (-2 * j / head_dim), rtol=1e-15, atol=0)
    # the two ramps differ on the tiny model (head dim 16, N 128): the code keeps pair 0 whole
    index = positions.yarn_frequencies(16, 1e4, scale=20.0, train_len=128)
    ratio = positions.yarn_frequencies(16, 1e4, scale=20.0, train_len=128, yarn_ramp="ratio")
    assert index[0] == 1.0 and ratio[0] < 0.7 and torch.equal(index[4:], ratio[4:])


# ------------------------------------------------------------------ one s a forward pass
def one_layer(name: str, seed: int = 0) -> Transformer:
    cfg = ModelConfig(vocab_size=97, n_layers=1, n_heads=2, dim=16, ffn_dim=40, init_std=0.5)
    torch.manual_seed(seed)
    return Transformer(cfg, variant(name), train_len=8).double().eval()


def dynamic_reference(model: Transformer, x: torch.Tensor) -> torch.Tensor:
    """The attention layer's output [T, dim] for its input x [T, dim] under YaRN's dynamic
    scaling, float64: one s = max(1, T / N) for every query, q *= (0.1 ln s + 1)^2 (Sec. 3.4,
    the logits over t, sqrt(1/t) = 0.1 ln s + 1), RoPE at theta's frequencies or (variant
    rope_scaling) their interpolation by s (Sec. 3.2), softmax under the causal mask."""
    attn, v = model.layers[0].attn, model.variant
    t_len, dim = x.shape
    heads, hd = attn.n_heads, dim // attn.n_heads
    s = max(1.0, t_len / model.train_len)
    temperature = (0.1 * math.log(s) + 1) ** 2
    theta = model.cfg.rope_theta if not v.rope_scaled_at_eval else model.rope_theta
    if v.rope_scaling == "yarn_dynamic":
        freqs = yarn_frequencies_reference(hd, theta, s, model.train_len)
    else:
        freqs = [theta ** (-2 * j / hd) for j in range(hd // 2)]
    q, k, val = ((x @ w.weight.T).view(t_len, heads, hd) for w in (attn.wq, attn.wk, attn.wv))
    outs = []
    for h in range(heads):
        qh, kh = rotate_reference(q[:, h], freqs), rotate_reference(k[:, h], freqs)
        scores = temperature * (qh @ kh.T) / math.sqrt(hd)
        causal = torch.ones(t_len, t_len, dtype=torch.bool).tril()
        outs.append(scores.masked_fill(~causal, float("-inf")).softmax(-1) @ val[:, h])
    return torch.cat(outs, dim=-1) @ attn.wo.weight.T


@pytest.mark.parametrize("factor", [1.0, 50.0], ids=["theta", "theta_x50"])
@pytest.mark.parametrize("multiple", [1, 3], ids=["1x", "3x_past_N"])
@pytest.mark.parametrize("name", DYNAMIC)
def test_dynamic_yarn_full_forward_takes_one_s_for_every_query(name: str, multiple: int,
                                                               factor: float) -> None:  # fmt: skip
    # the model's layer, fed by its own forward at length L, against dynamic_reference; (m3)
    # keeps theta as trained under the evals' x50, (m2) takes it
    model, seen = one_layer(name), []
    attn = model.layers[0].attn
    attn.register_forward_hook(lambda mod, args, out: seen.append((args[0][0], out[0])))
    ids = torch.randint(0, 97, (1, multiple * 8), generator=torch.Generator().manual_seed(3))
    with torch.no_grad(), scaled_rope_theta(model, factor):
        model(ids)
        (x, got), = seen  # fmt: skip
        want = dynamic_reference(model, x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)  # RoPE's float32 angles


@pytest.mark.parametrize("name", DYNAMIC)
def test_dynamic_yarn_decoding_takes_each_steps_length(name: str) -> None:
    # one layer: a step's output depends on the cache's keys and values only through the layer
    # input, so decoding token by token equals, at each step, the full forward of the prefix
    # (s = the step's length; under (m3) every key rotated at that step's frequencies)
    model = one_layer(name, seed=1)
    ids = torch.randint(0, 97, (2, 30), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        cache = model.new_cache(2, 30)
        torch.testing.assert_close(model(ids[:, :5], cache), model(ids[:, :5]), rtol=1e-12,
                                   atol=1e-12)  # fmt: skip
        for i in range(5, 30):
            step = model(ids[:, i : i + 1], cache)[:, -1]
            torch.testing.assert_close(step, model(ids[:, : i + 1])[:, -1], rtol=1e-10,
                                       atol=1e-10)  # fmt: skip


def test_per_query_and_dynamic_temperatures_agree_up_to_n_only() -> None:
    # (m) and (m2) on the same weights: s = 1 for every query up to N, then (m) takes each
    # query's own n_i / N and (m2) the pass's L / N
    per_query, dynamic = one_layer("m_yarn_temp_inference"), one_layer(DYNAMIC[0])
    ids = torch.randint(0, 97, (1, 24), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert torch.equal(per_query(ids[:, :8]), dynamic(ids[:, :8]))
        apart = (per_query(ids) - dynamic(ids)).abs().amax(-1)[0]
    assert apart[:8].max() > 1e-3 and apart[-1] < 1e-12  # the last query's n_i is L


# ------------------------------------------------------------------ NAPE
def test_nape_slopes_and_heads_are_the_authors() -> None:
    # deep-spin/asentmax get_nape_slopes(H, H // 2, "linear"): 1 / (1..H/2), then zeros
    assert positions.nape_slopes(4).tolist() == [1.0, 0.5, 0.0, 0.0]
    twelve = positions.nape_slopes(12)
    torch.testing.assert_close(twelve[:6], 1 / torch.arange(1.0, 7.0))
    assert (
        (twelve[6:] == 0).all() and positions.nape_scaled(12) == 6 and positions.nape_scaled(3) == 2
    )
    model = Transformer(ModelConfig(vocab_size=11, n_layers=1, n_heads=4, dim=16, ffn_dim=8),
                        variant("l_asentmax_nape"), 8)  # fmt: skip
    attn = model.layers[0].attn  # the length scale's projections: the NoPE heads only
    assert attn.len_beta.weight.shape == (2, 16) and attn.len_gamma.bias.shape == (2,)
    assert "layers.0.attn.alibi" not in model.state_dict()  # not a weight: from H alone


def test_nape_flex_score_mod_equals_the_explicit_kernel() -> None:
    # NAPE's slopes through FlexAttention's score_mod (run eagerly) and laws.attention, softmax
    import warnings

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=97, n_layers=2, n_heads=4, dim=32, ffn_dim=40)
    base = VariantConfig(positions="nape")
    explicit = Transformer(cfg, dataclasses.replace(base, path="explicit"), 8).eval()
    flexed = Transformer(cfg, dataclasses.replace(base, path="flex"), 8).eval()
    flexed.load_state_dict(explicit.state_dict())
    ids = torch.randint(0, 97, (2, 20))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # flex, eager: "materializes the full scores"
        cache = flexed.new_cache(2, 20)
        got = torch.cat([flexed(ids[:, :7], cache), flexed(ids[:, 7:], cache)], 1)
        torch.testing.assert_close(got, explicit(ids), rtol=1e-4, atol=1e-5)
        plain = Transformer(cfg, VariantConfig(path="explicit"), 8).eval()
        plain.load_state_dict(explicit.state_dict())
        assert (plain(ids) - explicit(ids)).abs().max() > 1e-2  # NAPE is not RoPE


# ------------------------------------------------------------------ the evals' theta factor
def test_rope_left_as_trained_where_the_variant_says_so() -> None:
    cfg = ModelConfig(vocab_size=11, n_layers=1, n_heads=1, dim=16, ffn_dim=8)
    positions = torch.arange(40)
    for name, takes_it in (("k_scale_invariant", True), ("k_scale_invariant_own_rope", False),
                           (DYNAMIC[1], False), ("a_softmax", True)):  # fmt: skip
        model = Transformer(cfg, variant(name), 8)
        before = model.rope(positions)
        with scaled_rope_theta(model, 50.0):
            after = model.rope(positions)
        same = all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
        assert same != takes_it, name
    own = Transformer(cfg, VariantConfig(rope_scaled_at_eval=False), 8)
    with scaled_rope_theta(own, 50.0):
        cos, _ = own.rope(positions)
    assert torch.equal(cos, Transformer(cfg, VariantConfig(), 8).rope(positions)[0])


def test_k2_and_m2_m3_take_their_starts_weights_and_sft() -> None:
    from ssmax.config.variants import facts

    for name, start in (("k_scale_invariant_own_rope", "k_scale_invariant"),
                        ("m_yarn_temp_per_pass_inference", "a_softmax"),
                        ("m_yarn_whole_dynamic_inference", "a_softmax")):  # fmt: skip
        f = facts(name)
        assert f.start == {"variant": start, "checkpoint": "weights"} and f.inherit == ["sft"]
    assert facts("l_asentmax_nape").start is None  # trained from scratch: NAPE is its model


# ------------------------------------------------------------------ settings refused
@pytest.mark.parametrize(("overrides", "says"), [
    (["variant=i_llama4_temp", "variant.positions=nape"], "variant.positions='nape' scales"),
    (["variant.positions=nape", "variant.path=sdpa"], "variant.path='sdpa' cannot run variant"
                                                      ".positions='nape'"),
    (["variant=l_asentmax_nape", "variant.rope_scaling=yarn_dynamic",
      "variant.rope_scaled_at_eval=false"], "variant.positions='nape' rotates no head"),
    (["variant=m_yarn_whole_dynamic_inference", "variant.rope_scaled_at_eval=true"],
     "replaces the evals' theta factor"),
    (["variant=m_yarn_whole_dynamic_inference", "variant.yarn_beta_fast=1"],
     "must be > variant.yarn_"),
    (["variant=k_scale_invariant", "variant.rope_scaling=yarn_dynamic",
      "variant.rope_scaled_at_eval=false"], "interpolates RoPE's theta spacing"),
])  # fmt: skip
def test_settings_that_do_not_go_together_are_one_line(overrides: list[str], says: str) -> None:
    cfg = compose("preset=smoke", *overrides)
    with pytest.raises(ConfigError, match="^[^\n]*$") as err:
        validate(cfg)
    assert says in str(err.value)


def test_the_new_variants_validate() -> None:
    for name in ("k_scale_invariant_own_rope", "l_asentmax_nape", *DYNAMIC):
        validate(compose("preset=smoke", f"variant={name}"))
