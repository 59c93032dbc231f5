"""Needle in a haystack (Sec. 3.3, Fig. 6).

The paper hides "The special magic {city} number is: {7 digits}." at depths 10/30/50/70/90% of
contexts up to ~10x the training length (prompts: ``haystack.py``), decodes greedily with the
most probable non-EOS token at each step, and scores the full number and its first digit, 1000
samples per cell, after SFT and with RoPE theta x50. Choices where the paper is silent:

- Greedy decoding with a KV cache: one prefill of the prompt, then one token at a time, for a
  fixed ``answer_tokens`` (8: enough for " " + 7 digits under any byte-level BPE). The prompts
  of one (context, depth) cell have one length, so they are decoded together, ``batch_size`` at
  a time (on a GPU one prompt at a time is kernel launches, not compute): every row is decoded
  exactly as it would be alone (tests/test_evals_niah.py). Builders make the next prompts
  while the device decodes: threads on the CPU, processes beside a GPU where the node has
  cores to spare for them (builders_for).
  ``compile``: the prefill and the decoding step under torch.compile with symbolic shapes, one
  graph each for every prompt and cache length.
- Scoring on decoded characters: the first run of digits in the answer is the reply; "full" if
  it starts with the number, "first_digit" if only its first digit is right, else "wrong" (also
  when there are no digits). The "first_digit" accuracy grid counts full answers too. Digits
  after the number still count as full: EOS is never chosen, so the model cannot end its
  reply, and a BPE that writes numbers in chunks (GPT-2's, or ``data.facts.in_tokenizer``) has
  room in ``answer_tokens`` to go on after the 7th digit, as it does: " 8056020" -> " 805602002".
  Under a BPE of one token per digit the 8 tokens end at the 7th digit and the rule is equality.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from itertools import product, repeat

import numpy as np
import torch
from omegaconf import DictConfig

from ssmax.data.lm import test_texts
from ssmax.data.tokenizer import Tokenizer
from ssmax.evals.haystack import (
    ANSWER_TOKENS,
    NeedleSample,
    build_sample,
    counted_ahead,
    random_needle,
    take_counted,
)
from ssmax.evals.inference import cache_dtype, device_autocast, model_device, prefetch
from ssmax.host.compiling import maybe_compile
from ssmax.model import KVCache, Transformer

DEPTHS = (0.1, 0.3, 0.5, 0.7, 0.9)
SCORES = ("full", "first_digit", "wrong")
AUTO_MAX_BATCH = 64  # prompts decoded together under batch_size=auto on a GPU
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
# Threads cutting prompts: the encoders release the GIL, the rest holds it. At most one a
# core, and at most 4: more threads build a prompt no faster (measured: docs/paper-scale.md,
# "Measurements behind the code's choices").
BUILDERS = min(4, CORES)
# Beside a GPU, processes: the decoding thread gives up the GIL at every eager op and extern
# kernel of a compiled graph and would wait to retake it from builder threads (measured:
# docs/paper-scale.md, "Performance on a GPU").
BUILDER_PROCESSES = min(8, CORES)


@dataclass
class NeedleRecord:
    context: int
    depth: float
    city: str
    number: str
    answer: str
    score: str
    needle_depth: float


@torch.no_grad()
def greedy_decode(
    model: Transformer, prompt: Sequence[int], max_new_tokens: int, eos_id: int
) -> list[int]:
    """Greedy tokens after the prompt, never EOS: one prefill, then one token at a time
    (bf16 autocast on a GPU)."""
    return greedy_decode_batch(model, [prompt], max_new_tokens, eos_id)[0]


def last_hidden(model: Transformer, ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """The last position's final hidden state once ids [B, t] continue the cache."""
    return model.hidden(ids, cache)[:, -1]


@torch.no_grad()
def greedy_decode_batch(
    model: Transformer,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    eos_id: int,
    compile: bool = False,
) -> list[list[int]]:
    """greedy_decode of prompts of one length, together: one prefill of [B, L], then one
    token of every row at a time. Rows never mix: each row's attention sees its own cache.
    compile: the prefill and the steps run compiled (one graph each for all lengths)."""
    if len({len(p) for p in prompts}) != 1:
        raise ValueError(f"prompts decoded together need one length, got {len(prompts[0])}...")
    extend = maybe_compile(last_hidden, compile, dynamic=True)
    cache = model.new_cache(len(prompts), len(prompts[0]) + max_new_tokens, cache_dtype(model))
    # through numpy: faster than torch.tensor of Python lists (measured: docs/paper-scale.md)
    ids = torch.from_numpy(np.array(prompts, dtype=np.int64)).to(model_device(model))
    out = []
    with device_autocast(model):
        hidden = extend(model, ids, cache)
        for step in range(max_new_tokens):
            logits = model.lm_head(hidden).float()
            logits[:, eos_id] = float("-inf")  # Sec. 3.3: the most probable non-EOS token
            token = logits.argmax(-1, keepdim=True)
            out.append(token)
            if step + 1 < max_new_tokens:
                hidden = extend(model, token, cache)
    return torch.cat(out, dim=1).tolist()  # one device-to-host copy at the end


def niah_batch(model: Transformer, setting: int | str, samples: int, context: int) -> int:
    """Prompts decoded together: eval.niah.batch_size, or auto: on a GPU a cell at once, up to
    AUTO_MAX_BATCH and to what 80% of the free memory holds at 3x the bf16 KV cache of one
    prompt of ``context`` tokens (room for the prefill's activations); one at a time on the
    CPU, where batching gained nothing."""
    if setting != "auto":
        return int(setting)
    device = model_device(model)
    if device.type != "cuda":
        return 1
    cfg = model.cfg
    per_prompt = 3 * 2 * cfg.n_layers * context * cfg.dim * 2  # keys and values, bf16, x3
    free, _ = torch.cuda.mem_get_info(device)
    return max(1, min(samples, AUTO_MAX_BATCH, int(0.8 * free // per_prompt)))


def score_answer(answer: str, number: str) -> str:
    """Score "full", "first_digit" or "wrong" from the first run of digits in the answer."""
    match = re.search(r"\d+", answer)
    if match is None:
        return "wrong"
    if match.group().startswith(number):
        return "full"
    return "first_digit" if match.group()[0] == number[0] else "wrong"


def prompt_batches(
    tokenizer: Tokenizer,
    data_cfg: DictConfig,
    cells: Sequence[tuple[int, int]],
    depths: Sequence[float],
    samples_per_cell: int,
    seed: int = 0,
    answer_tokens: int = ANSWER_TOKENS,
    pool: Executor | None = None,
    longest: int | None = None,
) -> Iterator[tuple[int, float, list[NeedleSample]]]:
    """(context, depth, prompts) for every (context, depth) cell, ``batch`` prompts at a time
    for each (context, batch) of ``cells``. The needles and haystacks are drawn in order (the
    same draws as one at a time); ``pool``'s builders (builder_pool; default: BUILDERS threads
    of this call's own) cut them into prompts. longest: the documents are counted up to it
    (default: the longest context of ``cells``)."""
    rng, texts = random.Random(seed), test_texts(data_cfg, seed=seed)
    longest = max(longest or 0, *(c for c, _ in cells))
    with nullcontext(pool) if pool else builder_pool(processes=False) as pool:
        docs = counted_ahead(texts, tokenizer, pool, cap=longest)
        for (context, batch), depth in product(cells, depths):
            for a in range(0, samples_per_cell, batch):
                n = min(batch, samples_per_cell - a)
                needles = [random_needle(rng) for _ in range(n)]
                cities, numbers = zip(*needles, strict=True)
                hays = [take_counted(docs, context) for _ in range(n)]
                part = pool.map(build_sample, repeat(tokenizer), hays, cities, numbers,
                                repeat(context), repeat(depth), repeat(answer_tokens),
                                repeat(data_cfg.sft_prompt))  # fmt: skip
                yield context, depth, list(part)


def builder_pool(processes: bool, builders: int | None = None) -> Executor:
    """Prompt builders, shut down when its ``with`` block ends: ``builders`` threads (default
    BUILDERS) or spawned processes (default BUILDER_PROCESSES). Processes start on demand, each
    importing torch and the main module (seconds): a node keeps one pool for all its cells. A
    tokenizer pickles as its file or name, loaded once a process."""
    if not processes:
        return ThreadPoolExecutor(builders or BUILDERS)
    spawn = multiprocessing.get_context("spawn")  # no fork of a process that holds CUDA
    return ProcessPoolExecutor(builders or BUILDER_PROCESSES, mp_context=spawn)


def builders_for(device_type: str, share: int) -> tuple[bool, int]:
    """(processes, how many) of a node's prompt builders: threads on the CPU (BUILDERS); beside
    a GPU, spawned processes, one a core of the node's share up to BUILDER_PROCESSES, where
    that share is 2 cores or more, else one thread. A share of 1 is the local executor's with
    as many workers as cores (the registered GPU run's 16 on 16): 8 processes a node there
    would be 128 starting interpreters on 16 cores, while one thread builds a tiny preset's
    prompts of a few thousand tokens in milliseconds each."""
    if device_type != "cuda":
        return False, BUILDERS
    return (True, min(BUILDER_PROCESSES, share)) if share >= 2 else (False, 1)


def model_builders(model: Transformer) -> Executor:
    """run_niah's builders for the model's device and the node's share of the cores (its torch
    threads: the local executor's share, else every core): builders_for."""
    return builder_pool(*builders_for(model_device(model).type, torch.get_num_threads()))


def run_niah(
    model: Transformer,
    tokenizer: Tokenizer,
    data_cfg: DictConfig,
    context_sizes: Sequence[int],
    depths: Sequence[float] = DEPTHS,
    samples_per_cell: int = 10,
    seed: int = 0,
    answer_tokens: int = ANSWER_TOKENS,
    batch_size: int | str = 1,
    compile: bool = False,
    builders: Executor | None = None,
) -> list[NeedleRecord]:
    """One record per (context size, depth, sample); run under ``scaled_rope_theta`` for Fig. 6.
    ``builders`` make the prompts (prompt_batches; default: model_builders, this call's own)
    while the device decodes them ``batch_size`` at a time (niah_batch), never across cells."""
    cells = [(c, niah_batch(model, batch_size, samples_per_cell, c)) for c in context_sizes]
    records = []
    with nullcontext(builders) if builders else model_builders(model) as pool:
        batches = prompt_batches(tokenizer, data_cfg, cells, depths, samples_per_cell, seed,
                                 answer_tokens, pool)  # fmt: skip
        for context, depth, part in prefetch(batches, depth=2):
            ids = [s.ids for s in part]
            tokens = greedy_decode_batch(model, ids, answer_tokens, tokenizer.eos_id, compile)
            for s, answer_ids in zip(part, tokens, strict=True):
                answer = tokenizer.decode(answer_ids)
                score = score_answer(answer, s.number)
                records.append(
                    NeedleRecord(context, depth, s.city, s.number, answer, score, s.needle_depth)
                )
    return records


def accuracy_grid(
    records: Sequence[NeedleRecord], level: str = "full"
) -> tuple[list[int], list[float], torch.Tensor]:
    """(contexts, depths, accuracy [C, D]); level "first_digit" also counts full answers."""
    ok = {"full": ("full",), "first_digit": ("full", "first_digit")}[level]
    contexts = sorted({r.context for r in records})
    depths = sorted({r.depth for r in records})
    hits = torch.zeros(len(contexts), len(depths), dtype=torch.float64)
    total = torch.zeros_like(hits)
    for r in records:
        i, j = contexts.index(r.context), depths.index(r.depth)
        total[i, j] += 1
        hits[i, j] += r.score in ok
    return contexts, depths, hits / total
