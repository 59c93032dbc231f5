"""Needle scores: attention paid to the needle's number (Sec. 3.4, Figs. 7 and 8).

The needle score of a layer and head is the attention weight, summed over the tokens from just
after the needle's colon to the end of the needle (the 7 digits and the final "."), of the query
that generates the first answer token, i.e. the last prompt position. Fig. 7 shows all layers and
heads for one prompt (context 8000, depth 50%, "Tokyo", 8106422); Fig. 8 the top score of each of
100 trials (random city, number, depth) with the trial's retrieval outcome.

How: forward hooks on every ``Attention`` capture the layer input of the first pass (the
prefill); for its last position q is recomputed exactly as the layer does (wq, RoPE, the
variant's multiplier m = s*log n etc. with n = number of keys) and one row
softmax(m q K^T / sqrt(d)) is taken over the layer's cached keys, in float64 (a law of the
general path: its score law and normaliser, laws.attention_weights, in float64; a learned sink
joins the row's denominator there too, so a row sums to less than 1). Only [H, n] rows
exist, never an n x n matrix. The model files are untouched. Span tokens are those whose decoded
text overlaps the characters after the colon up to the needle's end (``build_sample``), so a
token merging ":" with " 8" would count. Paper silent on trial depths: uniform in [0, 1] here.
"""

from __future__ import annotations

import inspect
import math
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from omegaconf import DictConfig

from ssmax.data.lm import test_texts
from ssmax.data.tokenizer import Tokenizer
from ssmax.evals.haystack import ANSWER_TOKENS, build_sample, random_needle, take_haystack
from ssmax.evals.inference import device_autocast, model_device
from ssmax.evals.niah import greedy_decode, score_answer
from ssmax.model import Transformer
from ssmax.model.attention import Attention
from ssmax.model.laws import ADAPTIVE, attention_weights


def _last_row(attn: Attention, args: dict) -> torch.Tensor:
    """Attention weights [H, n] of the last query of this call, over all its keys, outside any
    bf16 autocast: q and k at least float32, scores and softmax in float64."""
    x, cos, sin, term, cache = (args[k] for k in ("x", "cos", "sin", "term", "cache"))
    with torch.autocast(x.device.type, enabled=False):
        return _row(attn, x.to(torch.promote_types(x.dtype, torch.float32)), cos, sin, term,
                    cache, args["layer"])  # fmt: skip


def _row(attn: Attention, x, cos, sin, term, cache, layer: int) -> torch.Tensor:  # noqa: ANN001
    bsz, _, dim = x.shape
    if bsz != 1:
        raise ValueError("needle scores take one prompt at a time")
    q = attn.wq(x[:, -1:]).view(1, 1, attn.n_heads, attn.head_dim).transpose(1, 2)
    q = attn.rotate(q, cos, sin)  # the last position's angles (NAPE: none)
    rival = attn.general or attn.variant.scale in ADAPTIVE or attn.variant.sink
    if rival:  # the general path's factor (ASEntmax's reads the layer input)
        q = attn.scale_query(q.float(), x[:, -1:], None if term is None else term[-1:])
    elif term is not None:  # the same float32 multiplier the layer applies
        q = q.float() * attn.multiplier(term[-1:])[None, :, :, None]
    if cache is not None:  # the layer already wrote this call's keys (not yet counted)
        keys = cache.k[layer][:, :, : cache.length + x.shape[1]]
        if attn.rope_on_read:  # held before RoPE: rotated at this pass's angles (every key's)
            keys = attn.rotate(keys, cos, sin)
    else:
        k = attn.wk(x).view(1, -1, attn.n_heads, attn.head_dim).transpose(1, 2)
        keys = attn.rotate(k, cos, sin)
    if rival:  # its score law and normaliser, as the layer runs them (laws.attention_weights)
        past = keys.shape[-2] - 1
        sink = {name: w.double() for name, w in attn.sink_logits().items()}
        weights = attention_weights(q.double(), keys.double(), past=past,
                                    **attn.general_params(), **sink)  # fmt: skip
        return weights[0, :, 0]
    scores = q.double() @ keys.double().transpose(-1, -2) / math.sqrt(attn.head_dim)
    return scores.softmax(-1)[0, :, 0]


@contextmanager
def capture_last_attention(model: Transformer) -> Iterator[dict[int, torch.Tensor]]:
    """Yield {layer: [H, n]} filled with the last query's attention row of the first forward
    pass (the prefill); later calls (decoding steps) are ignored."""
    rows: dict[int, torch.Tensor] = {}
    handles = []
    for i, block in enumerate(model.layers):
        signature = inspect.signature(block.attn.forward)

        def hook(module, args, kwargs, output, i=i, signature=signature):  # noqa: ANN001
            if i not in rows:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                rows[i] = _last_row(module, bound.arguments)

        handles.append(block.attn.register_forward_hook(hook, with_kwargs=True))
    try:
        yield rows
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def attention_rows(model: Transformer, ids: Sequence[int]) -> torch.Tensor:
    """[n_layers, n_heads, n]: attention of the last position of ``ids`` (KV-cache prefill)."""
    with capture_last_attention(model) as rows, device_autocast(model):
        model.hidden(
            torch.tensor([list(ids)], device=model_device(model)), model.new_cache(1, len(ids))
        )
    return _stack(rows)


def needle_scores(model: Transformer, ids: Sequence[int], span: tuple[int, int]) -> torch.Tensor:
    """Needle score [n_layers, n_heads]: attention of the last prompt token summed over span."""
    return attention_rows(model, ids)[..., span[0] : span[1]].sum(-1)


def needle_score_map(
    model: Transformer,
    tokenizer: Tokenizer,
    data_cfg: DictConfig,
    context_tokens: int = 8000,
    depth: float = 0.5,
    city: str = "Tokyo",
    number: str = "8106422",
    seed: int = 0,
) -> torch.Tensor:
    """Fig. 7: needle scores [n_layers, n_heads] of one fixed needle (paper's defaults)."""
    hay = take_haystack(test_texts(data_cfg, seed=seed), tokenizer, context_tokens)
    template = data_cfg.sft_prompt
    s = build_sample(tokenizer, hay, city, number, context_tokens, depth, template=template)
    return needle_scores(model, s.ids, s.span)


def _stack(rows: dict[int, torch.Tensor]) -> torch.Tensor:
    return torch.stack([rows[i] for i in sorted(rows)])


@dataclass
class NeedleTrial:
    top_score: float
    layer: int
    head: int
    score: str  # retrieval outcome: full / first_digit / wrong
    city: str
    number: str
    depth: float
    answer: str


def top_needle_scores(
    model: Transformer,
    tokenizer: Tokenizer,
    data_cfg: DictConfig,
    context_tokens: int = 8000,
    trials: int = 100,
    seed: int = 0,
    answer_tokens: int = ANSWER_TOKENS,
) -> list[NeedleTrial]:
    """Fig. 8: per trial the top needle score over layers and heads, and the greedy outcome
    (one prefill serves both). Run under ``scaled_rope_theta``."""
    rng, texts = random.Random(seed), test_texts(data_cfg, seed=seed)
    template = data_cfg.sft_prompt
    out = []
    for _ in range(trials):
        city, number = random_needle(rng)
        depth = rng.random()
        hay = take_haystack(texts, tokenizer, context_tokens)
        s = build_sample(
            tokenizer, hay, city, number, context_tokens, depth, answer_tokens, template
        )
        with capture_last_attention(model) as rows:
            tokens = greedy_decode(model, s.ids, answer_tokens, tokenizer.eos_id)
        scores = torch.stack([rows[i] for i in range(len(model.layers))])[
            ..., s.span[0] : s.span[1]
        ]
        scores = scores.sum(-1)
        best = int(scores.argmax())
        layer, head = divmod(best, scores.shape[1])
        answer = tokenizer.decode(tokens)
        out.append(
            NeedleTrial(
                scores.max().item(),
                layer,
                head,
                score_answer(answer, number),
                city,
                number,
                depth,
                answer,
            )  # fmt: skip
        )
    return out
