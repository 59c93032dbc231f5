"""Parameter counts, the (e)/(f) init and conversion, optimizer groups, LR schedule."""

from __future__ import annotations

import math

import pytest
import torch

from ssmax.lit.lightning_module import lr_factor, param_groups
from ssmax.model import ModelConfig, Transformer, count_parameters, inv_mean_log_n, load_backbone
from ssmax.model.factory import model_config, variant_config
from tests.conftest import make_cfg

PAPER_A = 162_148_608


@pytest.mark.parametrize(
    ("variant", "extra"),
    [
        ("a_softmax", 0),
        ("b_ssmax", 144),
        ("c_ssmax_no_scale", 0),
        ("d_ssmax_bias", 288),
        ("e_swap_after_pretrain", 144),
        ("pn_rationale", 288 + 1024),
    ],
)
def test_paper_parameter_count(variant: str, extra: int) -> None:
    cfg = make_cfg("preset=paper", f"variant={variant}")
    # Built on the meta device: no 162M weights are allocated.
    assert count_parameters(model_config(cfg), variant_config(cfg), 1024) == PAPER_A + extra


def test_inv_mean_log_n_matches_paper() -> None:
    assert inv_mean_log_n(1024) == pytest.approx(0.16847, abs=5e-6)
    direct = 1 / (sum(math.log(n) for n in range(1, 1025)) / 1024)
    assert inv_mean_log_n(1024) == pytest.approx(direct, rel=1e-12)


def small(name: str) -> Transformer:
    cfg = make_cfg("preset=smoke", f"variant={name}")
    return Transformer(model_config(cfg), variant_config(cfg), cfg.data.seq_len)


def test_swap_softmax_weights_into_ssmax() -> None:
    torch.manual_seed(0)
    softmax = small("a_softmax")
    swapped = small("e_swap_after_pretrain")
    load_backbone(swapped, softmax.state_dict())
    s = torch.stack([block.attn.s for block in swapped.layers])
    assert torch.allclose(s, torch.full_like(s, inv_mean_log_n(64)))
    for key, value in softmax.state_dict().items():
        assert torch.equal(swapped.state_dict()[key], value)
    ids = torch.randint(0, 512, (1, 16))
    assert not torch.allclose(softmax(ids), swapped(ids))  # the multiplier acts


def test_load_backbone_refuses_mismatched_weights() -> None:
    with pytest.raises(ValueError, match="unexpected"):
        load_backbone(small("a_softmax"), small("d_ssmax_bias").state_dict())


def test_weight_decay_only_on_rank_two_and_up() -> None:
    model = small("pn_rationale")
    decay, no_decay = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    kept = {names[id(p)] for p in no_decay["params"]}
    assert "tok_emb.weight" in decayed and "layers.0.attn.wq.weight" in decayed
    assert {"p_n", "layers.0.attn.s", "layers.0.attn.b", "norm.weight"} <= kept
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim < 2 for p in no_decay["params"])
    assert len(decayed) + len(kept) == len(list(model.parameters()))


def test_lr_schedules() -> None:
    assert lr_factor(0, 10, 100, "constant", 0.0) == pytest.approx(0.1)
    assert lr_factor(9, 10, 100, "constant", 0.0) == 1.0
    assert lr_factor(99, 10, 100, "constant", 0.0) == 1.0
    assert lr_factor(10, 10, 100, "cosine", 0.0) == pytest.approx(1.0)
    assert lr_factor(55, 10, 100, "cosine", 0.0) == pytest.approx(0.5)
    assert lr_factor(100, 10, 100, "cosine", 0.1) == pytest.approx(0.1)


def test_model_config_defaults_are_the_paper_shape() -> None:
    cfg = ModelConfig()
    assert (cfg.n_layers, cfg.n_heads, cfg.dim, cfg.ffn_dim, cfg.rope_theta) == (
        12,
        12,
        768,
        2048,
        10_000.0,
    )
