"""The general path's FlexAttention kernel where it runs in the pipeline: a compiled model on
CUDA (variant.path=auto sends a softmax law through flex_attention's score_mod there). Its
forward and gradients equal the explicit kernel's run eagerly, for a query-factor law sent
through the general path and for (k), and so does (k)'s decoding under the KV cache. Runs only
on a CUDA machine (the CPU suite checks the eager flex kernel in test_attention)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from ssmax.model import ModelConfig, Transformer
from ssmax.model.factory import variant_config
from tests.conftest import make_cfg
from tests.test_attention import randomise_scalars

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def build(name: str, path: str) -> Transformer:
    torch.manual_seed(0)
    v = dataclasses.replace(variant_config(make_cfg(f"variant={name}")), path=path)
    cfg = ModelConfig(vocab_size=97, n_layers=2, n_heads=2, dim=32, ffn_dim=64)
    model = Transformer(cfg, v, train_len=16)
    randomise_scalars(model, torch.Generator().manual_seed(1))
    return model.cuda()


def loss_and_grads(
    model: Transformer, ids: torch.Tensor, compiled: bool
) -> tuple[torch.Tensor, dict]:
    logits = (torch.compile(model) if compiled else model)(ids)
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())
    loss.backward()  # the grads by the module's own names (a compiled one prefixes _orig_mod.)
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("name", ["b_ssmax", "k_scale_invariant"])
def test_compiled_flex_path_equals_the_explicit_kernel(name: str) -> None:
    ids = torch.randint(0, 97, (2, 48), device="cuda")
    want_logits, want_grads = loss_and_grads(build(name, "explicit"), ids, compiled=False)
    flexed = build(name, "auto" if name == "k_scale_invariant" else "flex")
    got_logits, got_grads = loss_and_grads(flexed, ids, compiled=True)
    torch.testing.assert_close(got_logits, want_logits, rtol=1e-4, atol=1e-4)
    for n, g in want_grads.items():
        torch.testing.assert_close(got_grads[n], g, rtol=1e-3, atol=1e-4, msg=n)


def test_compiled_decoding_under_the_kv_cache_equals_the_explicit_kernel() -> None:
    # as NIAH runs it (symbolic shapes, so tau is a symbolic float): a prefill through
    # FlexAttention, then one token a step through the explicit kernel (path=flex there failed
    # in inductor's codegen, torch 2.11: docs/rival-laws.md)
    ids = torch.randint(0, 97, (2, 48), device="cuda")
    flexed, eager = (build("k_scale_invariant", path).eval() for path in ("auto", "explicit"))
    with torch.no_grad():
        cache_e, cache_f = eager.new_cache(2, 48), flexed.new_cache(2, 48)
        step = torch.compile(flexed, dynamic=True)
        chunks = [slice(0, 40), *(slice(t, t + 1) for t in range(40, 48))]
        got = [step(ids[:, c], cache_f) for c in chunks]
        want = [eager(ids[:, c], cache_e) for c in chunks]
    torch.testing.assert_close(torch.cat(got, 1), torch.cat(want, 1), rtol=1e-4, atol=1e-4)
