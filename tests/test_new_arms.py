"""Issue 60's arms against float64 references written from their sources: gated attention (n, o:
Qiu et al. 2025, the authors' elementwise_attn_output_gate), adaptive temperature (p: the JAX
code of "softmax is not enough"), a learned sink logit per head (q, r: gpt-oss's sdpa). The
parametrised suites over every variant (tests/test_attention.py, test_export.py, the evals')
take them too; here: each whole layer at 1x and past N, in one pass and under the KV cache, the
fused sink equal to the general path's, the laws at known points, training, seed bundles."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from ssmax.config.compose import ConfigError
from ssmax.model import ModelConfig, Transformer, VariantConfig, laws
from ssmax.model.attention import Attention
from ssmax.model.factory import model_config, variant_config
from ssmax.model.transformer import count_parameters
from tests.conftest import make_cfg
from tests.test_attention import (
    adaptive_temperature_reference,
    first_layer_io,
    gate_reference,
    randomise_scalars,
    rotate_reference,
    sink_reference,
    term_reference,
    variant,
    weights_reference,
)

ARMS = ["n_gated", "o_gated_ssmax", "p_adaptive_temp_inference", "q_sink", "r_sink_ssmax"]
TRAINED = ["n_gated", "o_gated_ssmax", "q_sink", "r_sink_ssmax"]


def layer_reference(v: VariantConfig, attn: Attention, x: torch.Tensor, train_len: int):  # noqa: ANN201
    """The attention layer's output [T, dim] for its input x [T, dim] (float64), from the
    sources' equations: RoPE, q_i *= s_h log n_i (SSMax, Eq. 11), scores over keys j <= i with
    the sink as one more logit, the normaliser, weights @ V, the gate, wo."""
    t_len, dim = x.shape
    heads, hd = attn.n_heads, dim // attn.n_heads
    q, k, val = ((x @ w.weight.T).view(t_len, heads, hd) for w in (attn.wq, attn.wk, attn.wv))
    freqs = [10_000.0 ** (-2 * j / hd) for j in range(hd // 2)]
    outs = []
    for h in range(heads):
        qh, kh = rotate_reference(q[:, h], freqs), rotate_reference(k[:, h], freqs)
        if v.scale == "none":
            m = [1.0] * t_len
        else:
            s = float(attn.s[h].detach())
            m = [s * term_reference(v, [], i + 1, train_len) for i in range(t_len)]
        scores = torch.tensor(m, dtype=torch.float64)[:, None] * (qh @ kh.T) / math.sqrt(hd)
        sink = sink_reference(attn, h)
        weights = torch.stack([weights_reference(v, scores[i], i, sink) for i in range(t_len)])
        outs.append(weights @ val[:, h])
    return gate_reference(v, attn, torch.cat(outs, dim=-1), x) @ attn.wo.weight.T


@pytest.mark.parametrize("cached", [False, True], ids=["full", "kv_cache"])
@pytest.mark.parametrize("multiple", [1, 3], ids=["1x", "3x_past_N"])
@pytest.mark.parametrize("name", ARMS)
def test_arms_equal_their_sources_at_1x_and_past_n(name: str, multiple: int, cached: bool) -> None:
    # the model's first layer, fed by the model's own forward (its n, its KV cache: a prefill, a
    # chunk, then one token at a time), against layer_reference
    train_len, v = 8, variant(name)
    attn, x, got = first_layer_io(v, multiple, cached, train_len)
    with torch.no_grad():
        want = layer_reference(v, attn, x, train_len)
    # RoPE's angles and a law's term are float32 by design (as test_attention's rivals)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_the_arms_change_the_layer() -> None:
    # each arm's own part moves the output far past the tolerance above: the gate, the sink and
    # the adaptive temperature, each taken away, give another layer
    cfg = ModelConfig(vocab_size=97, n_layers=1, n_heads=2, dim=16, ffn_dim=40, init_std=0.5)
    x = torch.randn(1, 24, 16, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    for name, without in (("n_gated", {"gate": "none"}), ("q_sink", {"sink": False}),
                          ("p_adaptive_temp_inference", {"normalizer": "softmax"})):  # fmt: skip
        v = variant(name)
        torch.manual_seed(0)
        model = Transformer(cfg, v, train_len=8).double().eval()
        randomise_scalars(model, torch.Generator().manual_seed(2))
        bare = dataclasses.replace(v, **without)
        with torch.no_grad():
            cos, sin = model.rope(torch.arange(24))
            a = model.layers[0].attn
            got = a(x, cos.double(), sin.double(), None)
            a.variant, a.general = bare, bare.normalizer != "softmax"
            plain = a(x, cos.double(), sin.double(), None)
        assert (got - plain).abs().max() > 1e-2, name


def test_adaptive_temperature_is_the_papers_code() -> None:
    # rows from flat to sharp (entropies on both sides of 0.5), one with masked keys, in float64
    gen = torch.Generator().manual_seed(0)
    z = (
        torch.randn(6, 40, generator=gen, dtype=torch.float64)
        * torch.tensor([0.1, 1.0, 3.0, 6.0, 12.0, 2.0], dtype=torch.float64)[:, None]
    )
    z[5, 25:] = float("-inf")
    got = laws.adaptive_temperature(z)
    want = torch.tensor([adaptive_temperature_reference(r) for r in z.tolist()], dtype=z.dtype)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
    assert (got[5, 25:] == 0).all()
    p = torch.softmax(z, -1)
    entropy = -(p * torch.log(p + 1e-9)).sum(-1)
    low = entropy <= 0.5  # "don't overcorrect low-entropy heads": softmax as it is
    assert low.any() and (~low).any()
    torch.testing.assert_close(got[low], p[low], rtol=0, atol=0)
    # beta = 1 / theta >= 1: the entropy never grows, and falls where poly(H) > 1
    after = -(got * torch.log(got + 1e-9)).sum(-1)
    assert (after <= entropy + 1e-12).all() and (after[~low] < entropy[~low]).any()
    # a uniform row of n keys: H = log n, beta = poly(log n); two keys 1 apart show beta
    h = math.log(100)
    beta = -0.037 * h**4 + 0.481 * h**3 - 2.3 * h**2 + 4.917 * h - 1.791  # 2.39
    row = torch.zeros(100, dtype=torch.float64)
    row[0] = 1e-3  # H still ~log n; logits scaled by beta
    torch.testing.assert_close(
        laws.adaptive_temperature(row), torch.softmax(row * beta, -1), rtol=1e-6, atol=0
    )


def test_the_fused_sink_is_the_general_paths_sink() -> None:
    # laws.sink_attention (SDPA with one extra key) against laws.attention(sink=...) (the
    # explicit scores with one more entry), prefill, a chunk after a cache and one token, in
    # float64, float32 and bfloat16 (the CUDA runs' autocast)
    gen = torch.Generator().manual_seed(0)
    b, h, t, d = 2, 3, 13, 16
    q, k, v = (torch.randn(b, h, t, d, generator=gen, dtype=torch.float64) * 2 for _ in range(3))
    sink = torch.randn(h, generator=gen, dtype=torch.float64) * 3
    want = laws.attention(q, k, v, past=0, sink=sink)
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 2e-6), (torch.bfloat16, 5e-2)):
        qd, kd, vd = (x.to(dtype) for x in (q, k, v))
        for past in (0, 6, t - 1):
            own = sink.to(torch.promote_types(dtype, torch.float32))  # a float32 parameter
            got = laws.sink_attention(qd[:, :, past:], kd, vd, own, past=past)
            assert got.dtype == dtype
            torch.testing.assert_close(got.double(), want[:, :, past:], rtol=tol, atol=tol)
    # the sink takes weight: the rows sum to less than 1, and a sink of -inf is plain softmax
    w = laws.attention_weights(q, k, past=0, sink=sink)
    assert (w.sum(-1) < 1).all()
    plain = laws.sink_attention(q, k, v, torch.full((h,), -math.inf, dtype=torch.float64), past=0)
    torch.testing.assert_close(plain, laws.attention(q, k, v, past=0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["q_sink", "r_sink_ssmax"])
def test_fused_and_explicit_sink_paths_give_one_model(name: str) -> None:
    # variant.path=explicit (the general path, with its sink entry) against auto (SDPA with the
    # extra key), whole forwards and KV-cache decoding
    torch.manual_seed(0)
    v = variant(name)
    cfg = ModelConfig(vocab_size=97, n_layers=2, n_heads=2, dim=16, ffn_dim=40)
    base = Transformer(cfg, v, train_len=8).eval()
    randomise_scalars(base, torch.Generator().manual_seed(1))
    explicit = Transformer(cfg, dataclasses.replace(v, path="explicit"), train_len=8).eval()
    explicit.load_state_dict(base.state_dict())
    ids = torch.randint(0, 97, (2, 30))
    with torch.no_grad():
        for model in (base, explicit):
            cache = model.new_cache(2, 30)
            steps = [model(ids[:, :7], cache), model(ids[:, 7:9], cache)]
            steps += [model(ids[:, i : i + 1], cache) for i in range(9, 30)]
            torch.testing.assert_close(torch.cat(steps, 1), model(ids), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(explicit(ids), base(ids), rtol=1e-4, atol=1e-5)


def test_parameters_and_init() -> None:
    # the gate adds a dim x dim matrix a layer (N(0, init_std) as every matrix), the sink one
    # logit a head and layer (N(0, init_std), transformers' GptOss); (p) adds nothing to (a)
    cfg = ModelConfig(vocab_size=97, n_layers=3, n_heads=4, dim=32, ffn_dim=40, init_std=0.02)
    count = {name: count_parameters(cfg, variant(name), 8) for name in ["a_softmax", *ARMS]}
    a = count["a_softmax"]
    assert count["n_gated"] == a + 3 * 32 * 32 and count["q_sink"] == a + 3 * 4
    assert count["o_gated_ssmax"] == a + 3 * 32 * 32 + 3 * 4  # + s per layer and head
    assert count["r_sink_ssmax"] == a + 3 * 4 + 3 * 4
    assert count["p_adaptive_temp_inference"] == a
    torch.manual_seed(0)
    wide = dataclasses.replace(cfg, dim=256, n_heads=64, n_layers=8)
    model = Transformer(wide, variant("o_gated_ssmax"), 8)
    gates = torch.cat([b.attn.wg.weight.flatten() for b in model.layers])
    assert gates.std().item() == pytest.approx(0.02, rel=0.02)
    sinks = torch.cat([b.attn.sink for b in Transformer(wide, variant("q_sink"), 8).layers])
    assert sinks.numel() == 512 and sinks.std().item() == pytest.approx(0.02, rel=0.2)


@pytest.mark.parametrize("name", TRAINED)
def test_the_trained_arms_train(name: str) -> None:
    # one backward: every gradient finite, the gate's and the sink's not zero
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=97, n_layers=2, n_heads=2, dim=16, ffn_dim=40),
                        variant(name), train_len=8)  # fmt: skip
    ids = torch.randint(0, 97, (2, 12))
    loss = torch.nn.functional.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values()), name
    own = [n for n in grads if n.endswith(("attn.wg.weight", "attn.sink"))]
    assert own and all(grads[n].abs().sum() > 0 for n in own)


@pytest.mark.parametrize("name", ["o_gated_ssmax", "r_sink_ssmax"])
def test_a_seed_bundle_runs_the_arms_as_a_loop_does(name: str) -> None:
    # the GPU's bundled-seeds path (ssmax.model.bundle): vmap through the gate and the sink's
    # extra key equals a plain loop over the seeds
    from ssmax.model.bundle import SeedBundle

    cfg = make_cfg("preset=smoke", f"variant={name}")
    ids = torch.randint(
        0, cfg.data.vocab_size, (2, 2, 33), generator=torch.Generator().manual_seed(5)
    )
    out = []
    for vmap in (True, False):
        bundle = SeedBundle.from_seeds(
            model_config(cfg), variant_config(cfg), 32, [0, 1], vmap=vmap
        )
        bundle.to(dtype=torch.float64)
        loss = bundle.loss(ids[..., :-1], ids[..., 1:])
        loss.sum().backward()
        out.append((loss, {n: p.grad for n, p in bundle.params.items()}))
    (a, ga), (b, gb) = out
    torch.testing.assert_close(a, b, rtol=1e-12, atol=0)
    for n in ga:
        torch.testing.assert_close(ga[n], gb[n], rtol=1e-10, atol=1e-14, msg=n)


def test_flex_cannot_run_a_sink() -> None:
    from ssmax.preflight.settings import validate

    cfg = make_cfg("preset=smoke", "variant=q_sink", "variant.path=flex")
    with pytest.raises(ConfigError, match="variant.path='flex' cannot run variant.sink=true"):
        validate(cfg)
    validate(make_cfg("preset=smoke", "variant=q_sink", "variant.path=explicit"))


# ------------------------------------------------------------------ with the rivals' own settings
# Issue 60's two sets meet in one code path: these arms (gate, sink, adaptive temperature) and
# tests/test_rivals_own.py's settings ((l2)'s NAPE: laws.attention's alibi; (m2)'s n a pass;
# (m3)'s keys cached before RoPE). No declared variant combines them; these do, so that each
# combination is held to the references, to the KV cache and to the export.
TOGETHER = {
    "l2_sink_gate": ("l_asentmax_nape", {"sink": True, "gate": "elementwise"}),
    "p_nape_sink": ("p_adaptive_temp_inference", {"positions": "nape", "sink": True}),
    "m2_sink": ("m_yarn_temp_per_pass_inference", {"sink": True}),
    "m3_sink_gate": ("m_yarn_whole_dynamic_inference", {"sink": True, "gate": "elementwise"}),
}


def together(key: str) -> VariantConfig:
    name, changes = TOGETHER[key]
    return dataclasses.replace(variant(name), **changes)


@pytest.mark.parametrize("key", TOGETHER)
def test_both_sets_together_equal_the_references_in_one_layer(key: str) -> None:
    from tests.test_attention import layer_matches_naive_reference

    layer_matches_naive_reference(together(key), seed=len(key))


@pytest.mark.parametrize("key", TOGETHER)
def test_both_sets_together_decode_as_the_full_forward(key: str) -> None:
    # one layer: a call's last output depends on the cache only through the layer's input, so
    # a prefill, a chunk and single tokens under the KV cache give, at each call's last
    # position, the full forward of that prefix (its pass's s under (m2), (m3); (m3)'s cached
    # keys rotated at each pass's frequencies, then the sink's key put in front)
    cfg = ModelConfig(vocab_size=97, n_layers=1, n_heads=2, dim=16, ffn_dim=40, init_std=0.5)
    torch.manual_seed(0)
    model = Transformer(cfg, together(key), train_len=8).double().eval()
    randomise_scalars(model, torch.Generator().manual_seed(1))
    ids = torch.randint(0, 97, (2, 30), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        cache = model.new_cache(2, 30)
        calls = [(0, 5), (5, 7)] + [(i, i + 1) for i in range(7, 30)]
        for start, end in calls:
            step = model(ids[:, start:end], cache)[:, -1]
            torch.testing.assert_close(step, model(ids[:, :end])[:, -1], rtol=1e-10,
                                       atol=1e-10)  # fmt: skip


@pytest.mark.parametrize("key", ["m2_sink", "m3_sink_gate"])
def test_both_sets_fused_and_explicit_give_one_model(key: str) -> None:
    # (m2), (m3) with a sink run SDPA with the extra key; variant.path=explicit gives the same
    # model through the general path's sink entry, whole forwards and under the KV cache
    cfg = ModelConfig(vocab_size=97, n_layers=2, n_heads=2, dim=16, ffn_dim=40, init_std=0.5)
    torch.manual_seed(0)
    v = together(key)
    base = Transformer(cfg, v, train_len=8).double().eval()
    randomise_scalars(base, torch.Generator().manual_seed(1))
    explicit = Transformer(cfg, dataclasses.replace(v, path="explicit"), train_len=8)
    explicit = explicit.double().eval()
    explicit.load_state_dict(base.state_dict())
    assert not base.layers[0].attn.general and explicit.layers[0].attn.general
    ids = torch.randint(0, 97, (2, 30), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        torch.testing.assert_close(explicit(ids), base(ids), rtol=1e-10, atol=1e-10)
        steps = []
        for model in (base, explicit):
            cache = model.new_cache(2, 30)
            out = [model(ids[:, :7], cache), model(ids[:, 7:9], cache)]
            out += [model(ids[:, i : i + 1], cache) for i in range(9, 30)]
            steps.append(torch.cat(out, 1))
        torch.testing.assert_close(steps[1], steps[0], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("key", ["l2_sink_gate", "p_nape_sink", "m3_sink_gate"])
def test_both_sets_together_export_to_transformers(
    key: str, tmp_path: Path, shared_cache: Path
) -> None:
    # the export's config carries both sets' keys; transformers' model gives the project's
    # logits at 1x and 4x, theta as trained and x50, and left padding counts as no key
    from ssmax.evals import scaled_rope_theta
    from ssmax.export.folder import write_export
    from tests.test_export import RTOL, load_hf, max_differences, random_model, smoke_cfg

    name, changes = TOGETHER[key]
    cfg = smoke_cfg(name, shared_cache)
    for field, value in changes.items():
        cfg.variant[field] = value
    model = random_model(cfg)
    assert all(getattr(model.variant, f) == value for f, value in changes.items())
    path = write_export(model, cfg.data, tmp_path / key)
    config = json.loads((path / "config.json").read_text())
    for field, value in changes.items():
        assert config[f"ssmax_{field}"] == value, field
    n = cfg.data.seq_len
    ids = torch.randint(
        0, cfg.data.vocab_size, (2, 4 * n), generator=torch.Generator().manual_seed(1)
    )
    for factor in (1.0, 50.0):
        hf = load_hf(path, factor)
        with torch.no_grad(), scaled_rope_theta(model, factor):
            for length in (n, 4 * n):
                _, rel = max_differences(model(ids[:, :length]), hf(ids[:, :length]).logits)
                assert rel < RTOL, (factor, length, rel)
    hf = load_hf(path)
    short, long = (torch.randint(1, cfg.data.vocab_size, (1, k)) for k in (30, 40))
    alone = hf.generate(short, attention_mask=torch.ones_like(short))[0, 30:]
    batch = torch.cat([torch.cat([torch.full((1, 10), hf.config.pad_token_id), short], 1), long])
    mask = torch.ones_like(batch)
    mask[0, :10] = 0
    assert torch.equal(hf.generate(batch, attention_mask=mask)[0, 40:], alone)
