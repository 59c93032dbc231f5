"""Every variant's attention against a naive float64 reference with explicit mask and n."""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import pytest
import torch

from ssmax.config import variant_config
from ssmax.model import ModelConfig, Transformer, VariantConfig, laws
from ssmax.model.attention import SCALES, Attention, length_term
from ssmax.model.rope import apply_rope, rope_angles
from tests.conftest import VARIANTS, make_cfg


def variant(name: str) -> VariantConfig:
    return variant_config(make_cfg(f"variant={name}"))


def rope_reference(x: torch.Tensor, theta: float, offset: int = 0) -> torch.Tensor:
    """Pairs (j, j + d/2) of x [T, D] rotated by (offset + t) * theta^(-2j/d), loop by loop."""
    out = x.clone()
    t_len, d = x.shape
    for t in range(t_len):
        for j in range(d // 2):
            a = (offset + t) * theta ** (-2 * j / d)
            x1, x2 = x[t, j].item(), x[t, j + d // 2].item()
            out[t, j] = x1 * math.cos(a) - x2 * math.sin(a)
            out[t, j + d // 2] = x1 * math.sin(a) + x2 * math.cos(a)
    return out


# law -> its term for a query that sees n keys, in float64, from the table in the design notes
# (and, for the laws beyond the paper, from their sources: Qwen's logn_attn, Llama 4's
# attn_temperature_tuning). A new law in ssmax/model/laws.py adds its line here.
TERMS = {
    "log_n": lambda v, p_n, n, train_len: math.log(n),
    "p_n": lambda v, p_n, n, train_len: p_n[min(n, len(p_n)) - 1],
    "qwen_log_n": lambda v, p_n, n, train_len: max(1.0, math.log(n, train_len)),
    "llama4": lambda v, p_n, n, train_len: (
        1 + v.beta * math.log(1 + math.floor(n / (v.floor_scale * train_len)))
    ),
    "sqrt_log_n": lambda v, p_n, n, train_len: math.sqrt(math.log(n)),
}


def term_reference(v: VariantConfig, p_n: list[float], n: int, train_len: int) -> float:
    """The length term for a query that sees n keys (TERMS)."""
    return TERMS[v.scale](v, p_n, n, train_len)


def multiplier_reference(
    v: VariantConfig, s: float, b: float, p_n: list[float], n: int, train_len: int
) -> float:
    """m for a query that sees n keys."""
    if v.scale == "none":
        return 1.0
    return s * term_reference(v, p_n, n, train_len) + (b if v.bias else 0.0)


def randomise_scalars(module: torch.nn.Module, gen: torch.Generator) -> None:
    """Move s, b, p_n off their init so the test sees them act."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith(("attn.s", "attn.b", "p_n")) or name in ("s", "b"):
                p.copy_(torch.rand(p.shape, generator=gen, dtype=p.dtype) * 1.5 + 0.2)


@pytest.mark.parametrize("name", VARIANTS)
def test_attention_matches_naive_reference(name: str) -> None:
    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    v, dim, heads, t_len, theta = variant(name), 16, 2, 11, 10_000.0
    attn = Attention(dim, heads, v, train_len=8).double()
    randomise_scalars(attn, gen)
    p_n = (torch.rand(8, generator=gen, dtype=torch.float64) + 0.5) if v.scale == "p_n" else None
    x = torch.randn(1, t_len, dim, generator=gen, dtype=torch.float64)
    positions = torch.arange(t_len)
    cos, sin = rope_angles(positions, dim // heads, theta)
    term = length_term(v, positions + 1, p_n, train_len=8)
    got = attn(x, cos.double(), sin.double(), term)

    hd = dim // heads
    q = (x[0] @ attn.wq.weight.T).view(t_len, heads, hd)
    k = (x[0] @ attn.wk.weight.T).view(t_len, heads, hd)
    val = (x[0] @ attn.wv.weight.T).view(t_len, heads, hd)
    outs = []
    for h in range(heads):
        qh, kh = rope_reference(q[:, h], theta), rope_reference(k[:, h], theta)
        s = float(attn.s[h].detach()) if v.scale != "none" else 1.0
        b = float(attn.b[h].detach()) if v.bias else 0.0
        pn = p_n.tolist() if p_n is not None else []
        m = torch.tensor(
            [multiplier_reference(v, s, b, pn, i + 1, 8) for i in range(t_len)],
            dtype=torch.float64,
        )
        scores = m[:, None] * (qh @ kh.T) / math.sqrt(hd)
        mask = torch.ones(t_len, t_len, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        outs.append(torch.softmax(scores, dim=-1) @ val[:, h])
    want = torch.cat(outs, dim=-1) @ attn.wo.weight.T
    # RoPE angles are float32 by design (1e-7 relative); a wrong multiplier is off by O(1).
    torch.testing.assert_close(got[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("theta", [10_000.0, 500_000.0])
def test_rope_matches_reference_including_theta_x50(theta: float) -> None:
    x = torch.randn(7, 8, dtype=torch.float64)
    cos, sin = rope_angles(torch.arange(100, 107), 8, theta)
    got = apply_rope(x[None, None], cos.double(), sin.double())[0, 0]
    torch.testing.assert_close(got, rope_reference(x, theta, offset=100), rtol=1e-6, atol=1e-6)


def test_rope_theta_changes_angles() -> None:
    c1, _ = rope_angles(torch.arange(50), 8, 10_000.0)
    c2, _ = rope_angles(torch.arange(50), 8, 500_000.0)
    assert not torch.allclose(c1, c2)
    assert c1.dtype == torch.float32


@pytest.mark.parametrize("name", VARIANTS)
def test_kv_cache_decoding_equals_full_forward(name: str) -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=97, n_layers=2, n_heads=2, dim=16, ffn_dim=40)
    model = Transformer(cfg, variant(name), train_len=12).double().eval()
    randomise_scalars(model, torch.Generator().manual_seed(1))
    ids = torch.randint(0, 97, (2, 20))
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache(batch=2, max_len=20)
        steps = [model(ids[:, :5], cache), model(ids[:, 5:9], cache)]  # prefill, then a chunk
        steps += [model(ids[:, i : i + 1], cache) for i in range(9, 20)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-9, atol=1e-9)


def test_kv_cache_overflow_is_a_clear_error() -> None:
    model = Transformer(
        ModelConfig(vocab_size=11, n_layers=1, n_heads=1, dim=8, ffn_dim=8),
        VariantConfig(),
        train_len=4,
    )
    cache = model.new_cache(batch=1, max_len=3)
    with pytest.raises(ValueError, match="KV cache full"):
        model(torch.zeros(1, 4, dtype=torch.long), cache)


def test_length_laws_beyond_the_paper_at_known_points() -> None:
    n = torch.tensor([1, 8, 64, 8 * 8, 24])
    qwen = length_term(VariantConfig(scale="qwen_log_n"), n, None, train_len=8)
    torch.testing.assert_close(qwen, torch.tensor([1.0, 1.0, 2.0, 2.0, math.log(24, 8)]))
    llama = length_term(VariantConfig(scale="llama4", beta=0.1), n, None, train_len=8)
    want = [1.0, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(9), 1 + 0.1 * math.log(9)]
    torch.testing.assert_close(llama, torch.tensor([*want, 1 + 0.1 * math.log(4)]))
    root = length_term(VariantConfig(scale="sqrt_log_n"), n, None, train_len=8)
    torch.testing.assert_close(root, torch.log(n.double()).sqrt().float())


def test_every_law_has_a_reference_and_a_variant() -> None:
    # laws.py holds each law once: each is tested against its float64 reference (TERMS) through
    # a variant of conf/variant/ (the test above), and the schema's choices are exactly them
    assert set(TERMS) == set(laws.LAWS)
    assert {variant(name).scale for name in VARIANTS} == {"none", *laws.LAWS}
    assert ("none", *laws.LAWS) == SCALES
    for name in laws.PARAMS:  # a law's own parameter is a variant field of the same name
        assert name in VariantConfig.__dataclass_fields__, name


@pytest.mark.parametrize("law", SCALES)
def test_each_law_equals_its_reference_far_past_the_training_length(law: str) -> None:
    # laws.length_term itself (the model's and the export's) against TERMS, n up to 100 N, with
    # beta and floor_scale off their defaults
    v = VariantConfig(scale=law, beta=0.3, floor_scale=0.5)
    n, table = torch.tensor([1, 2, 7, 8, 9, 15, 16, 17, 64, 800]), [0.5 + i / 8 for i in range(8)]
    params = {name: getattr(v, name) for name in laws.PARAMS}
    got = laws.length_term(law, n, train_len=8, p_n=torch.tensor(table), **params)
    if law == "none":
        assert got is None
        return
    want = torch.tensor([term_reference(v, table, int(i), 8) for i in n], dtype=torch.float64)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)


def test_the_laws_file_is_plain_torch() -> None:
    # the export ships laws.py alone beside modeling_ssmax.py: no project import, no transformers
    import ast

    tree = ast.parse(Path(laws.__file__).read_text())
    nodes = list(ast.walk(tree))
    imported = {a.name for node in nodes if isinstance(node, ast.Import) for a in node.names}
    imported |= {node.module for node in nodes if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "math", "collections.abc", "torch"}, imported
    with pytest.raises(ValueError, match="law='nope'; allowed: none, log_n, p_n"):
        laws.length_term("nope", torch.tensor([1]), train_len=8)
