"""Needle in a haystack: exact prompt length, needle depth, scoring, greedy KV-cache decoding."""

from __future__ import annotations

import bisect
import itertools
import multiprocessing
import random
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig

from ssmax.data.lm import test_texts
from ssmax.data.sft_batches import prompt_ids
from ssmax.data.tokenizer import Tokenizer, load_tokenizer
from ssmax.evals import scaled_rope_theta
from ssmax.evals.haystack import (
    CITIES,
    NEEDLE,
    QUESTION,
    CutPrompts,
    build_sample,
    encoded_prefix,
    random_needle,
    take_haystack,
)
from ssmax.evals.niah import (
    BUILDER_PROCESSES,
    BUILDERS,
    SCORES,
    accuracy_grid,
    builder_pool,
    builders_for,
    greedy_decode,
    greedy_decode_batch,
    prompt_batches,
    run_niah,
    score_answer,
)
from ssmax.evals.spans import token_finder
from tests.conftest import make_cfg
from tests.test_evals_loss import tiny_model


@pytest.fixture(scope="module")
def data_cfg(shared_cache: Path) -> DictConfig:
    return make_cfg("preset=smoke", f"paths.cache_dir={shared_cache}").data


@pytest.fixture(scope="module")
def tokenizer(data_cfg: DictConfig) -> Tokenizer:
    return load_tokenizer(data_cfg)


def test_cities_distinct_and_numbers_have_seven_digits() -> None:
    assert len(CITIES) == len(set(CITIES)) >= 100
    rng = random.Random(0)
    for _ in range(200):
        city, number = random_needle(rng)
        assert city in CITIES and len(number) == 7 and number.isdigit() and number[0] != "0"


@pytest.mark.parametrize("context", [300, 1000, 3000])
def test_prompt_length_and_needle_depth(
    data_cfg: DictConfig, tokenizer: Tokenizer, context: int
) -> None:
    texts = test_texts(data_cfg, seed=1)
    for depth in (0.0, 0.1, 0.3, 0.5, 0.7, 0.9):
        hay = take_haystack(texts, tokenizer, context)
        s = build_sample(tokenizer, hay, "Tokyo", "8106422", context, depth, answer_tokens=8)
        assert len(s.ids) == context - 8  # room left for the 8 answer tokens
        text = tokenizer.decode(s.ids)
        assert text.endswith("\n\nQuestion: " + QUESTION.format(city="Tokyo") + "\nAnswer:")
        assert text.count(NEEDLE.format(city="Tokyo", number="8106422")) == 1
        context_text = text[: text.index("\n\nQuestion:")]
        assert prompt_ids(tokenizer, context_text, QUESTION.format(city="Tokyo")) == s.ids
        # The needle's own tokens and the span from just after the colon to its end
        assert tokenizer.decode(s.ids[s.needle_start :]).lstrip().startswith("The special magic")
        assert tokenizer.decode(s.ids[s.span[0] : s.span[1]]).strip() == "8106422."
        # Depth by token position: within the snap tolerance (2.5%) plus a few tokens
        assert s.needle_depth == pytest.approx(depth, abs=0.025 + 4 / context)
        # Independently: re-tokenize the haystack around the needle
        needle_at = context_text.index(NEEDLE.format(city="Tokyo", number="8106422"))
        before = len(tokenizer.encode(context_text[:needle_at]))
        rest = context_text[needle_at + len(NEEDLE.format(city="Tokyo", number="8106422")) :]
        hay = before + len(tokenizer.encode(rest))
        assert before / hay == pytest.approx(depth, abs=0.025 + 4 / context)
        assert abs(s.needle_start - before) <= 1


@pytest.mark.parametrize("kind", ["bpe", "gpt2"])
def test_cut_prompts_equal_encoding_the_whole_text(
    data_cfg: DictConfig, tokenizer: Tokenizer, shared_cache: Path, kind: str
) -> None:
    """The prompt fit's token counts and ids (pieces cut between words) equal encoding the
    whole prompt, at every cut tried, in the head or the tail: prose, odd spacing, digits,
    non-ASCII letters."""
    if kind == "gpt2":
        cfg = make_cfg("data.tokenizer=gpt2", "data.vocab_size=50257",
                       f"paths.cache_dir={shared_cache}")  # fmt: skip
        tokenizer = load_tokenizer(cfg.data)
    texts = test_texts(data_cfg, seed=4)
    odd = " Ünïcödé wörds  and   spaces,\tdigits 1234 it's don't  Zürich café naïve 東京 x y"
    tail = take_haystack(texts, tokenizer, 600) + odd * 3 + take_haystack(texts, tokenizer, 200)
    head = "Some context ends here. The special magic Tokyo number is: 8106422. "
    text, post = head + tail, "\n\nQuestion: What is the special magic Tokyo number?\nAnswer:"

    every = CutPrompts(tokenizer, text, post, spacing=1)  # every cut between words
    assert every.cuts == [
        i
        for i in range(1, len(text) - 1)
        if text[i] == " " and text[i - 1].isalpha() and text[i + 1].isalpha()
    ]
    assert len(every.cuts) > 50 and every.cuts[0] < len(head)
    sparse = CutPrompts(tokenizer, text, post)  # build_sample's: cuts ~160 characters apart
    assert set(sparse.cuts) < set(every.cuts) and len(sparse.cuts) > 5
    rng = random.Random(0)
    ends = [0, 1, 2, 3, len(head) - 1, len(head), len(text), *rng.sample(range(len(text)), 300)]
    cap = len(tokenizer.encode(text[: len(text) // 2] + post))  # encoded as far as past half
    capped = CutPrompts(tokenizer, text, post, cap=cap, chars=len(text) // 4)
    assert capped.horizon < len(text) and len(capped.whole) > cap
    for end in ends:
        ids = tokenizer.encode(text[:end] + post)
        assert every.count(end) == sparse.count(end) == len(ids), end
        assert every.ids(end) == sparse.ids(end) == ids, end
        # capped: exact up to cap, "more than cap" past it, as a fit compares them
        counted = capped.count(end, cap)
        assert counted == len(ids) if len(ids) <= cap else counted > cap, end
        if end <= capped.horizon + 1:
            assert capped.ids(end) == ids, end


@pytest.mark.parametrize("kind", ["bpe", "gpt2"])
def test_encoded_prefix_is_the_start_of_the_whole_encoding(
    data_cfg: DictConfig, tokenizer: Tokenizer, shared_cache: Path, kind: str
) -> None:
    if kind == "gpt2":
        cfg = make_cfg("data.tokenizer=gpt2", "data.vocab_size=50257",
                       f"paths.cache_dir={shared_cache}")  # fmt: skip
        tokenizer = load_tokenizer(cfg.data)
    text = take_haystack(test_texts(data_cfg, seed=5), tokenizer, 3000)
    whole = tokenizer.encode(text)
    for tokens, chars in [(1, 0), (100, 10), (1000, 6000), (2000, 100), (len(whole), 0)]:
        h, ids = encoded_prefix(tokenizer, text, tokens, chars)
        assert len(ids) >= tokens and ids == whole[: len(ids)] == tokenizer.encode(text[:h])
    assert encoded_prefix(tokenizer, text, len(whole) + 1, 0) == (len(text), whole)  # too few


@pytest.mark.parametrize("kind", ["bpe", "gpt2"])
def test_token_finder_gives_the_token_holding_each_character(
    data_cfg: DictConfig, tokenizer: Tokenizer, shared_cache: Path, kind: str
) -> None:
    """For every character of a text (multi-byte ones split between tokens included), the
    token found holds the character's first UTF-8 byte."""
    if kind == "gpt2":
        cfg = make_cfg("data.tokenizer=gpt2", "data.vocab_size=50257",
                       f"paths.cache_dir={shared_cache}")  # fmt: skip
        tokenizer = load_tokenizer(cfg.data)
    odd = "Zürich café — 東京 costs 5€; naïve 😀🀄 ẞ x  y\t"
    text = odd + take_haystack(test_texts(data_cfg, seed=4), tokenizer, 300) + odd * 2
    ids = tokenizer.encode(text)
    pieces = tokenizer.token_bytes(ids)
    assert b"".join(pieces) == text.encode() and tokenizer.decode(ids) == text
    ends = list(itertools.accumulate(len(p) for p in pieces))
    assert any(len(p.decode("utf-8", "replace")) != len(p.decode("utf-8", "ignore"))
               for p in pieces)  # some token splits a character  # fmt: skip
    find = token_finder(tokenizer, ids)
    for c in range(len(text)):
        first_byte = len(text[:c].encode())
        assert find(c) == bisect.bisect_right(ends, first_byte), c


@pytest.mark.parametrize(
    ("answer", "score"),
    [
        (" 8106422", "full"),
        ("8106422.", "full"),
        (" The number is 8106422, yes", "full"),
        (" 8106423", "first_digit"),
        (" 81064221", "full"),  # the number, then digits: EOS is never chosen
        (" 8106", "first_digit"),  # short of the number
        (" 8", "first_digit"),
        (" 1106422", "wrong"),
        (" Tokyo", "wrong"),
        ("", "wrong"),
        (" 81 06422", "first_digit"),  # the first run of digits is the reply
    ],
)
def test_score_answer(answer: str, score: str) -> None:
    assert score_answer(answer, "8106422") == score


def naive_greedy(model, prompt: list[int], steps: int, eos_id: int | None) -> list[int]:
    """Re-run the whole context at every step; eos_id=None allows EOS."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([ids]))[0, -1]
            if eos_id is not None:
                logits[eos_id] = float("-inf")
            ids.append(int(logits.argmax()))
    return ids[len(prompt) :]


@pytest.mark.parametrize("variant", ["a_softmax", "b_ssmax", "d_ssmax_bias"])
def test_kv_cache_decoding_matches_full_recompute(variant: str) -> None:
    model = tiny_model(variant, seed=1)
    prompt = torch.randint(1, model.cfg.vocab_size, (90,)).tolist()  # longer than train_len
    with scaled_rope_theta(model, 50):
        got = greedy_decode(model, prompt, 12, eos_id=0)
        assert got == naive_greedy(model, prompt, 12, eos_id=0)


@pytest.mark.parametrize("variant", ["a_softmax", "b_ssmax", "i_llama4_temp"])
def test_batched_decoding_gives_each_prompt_its_own_answer(variant: str) -> None:
    """Five prompts of one length decoded together give, row for row, what each gives alone."""
    model = tiny_model(variant, seed=4)
    prompts = torch.randint(1, model.cfg.vocab_size, (5, 90)).tolist()
    with scaled_rope_theta(model, 50):
        together = greedy_decode_batch(model, prompts, 6, eos_id=0)
        alone = [greedy_decode(model, p, 6, eos_id=0) for p in prompts]
    assert together == alone and len(set(map(tuple, alone))) > 1  # the rows differ
    with pytest.raises(ValueError, match="one length"):
        greedy_decode_batch(model, [prompts[0], prompts[1][:-1]], 2, eos_id=0)


def test_run_niah_batched_equals_one_at_a_time(data_cfg: DictConfig, tokenizer: Tokenizer) -> None:
    model = tiny_model("b_ssmax", seed=5)
    args = (model, tokenizer, data_cfg, [128, 192], (0.1, 0.7), 4)
    with scaled_rope_theta(model, 50):
        one = run_niah(*args, seed=2, batch_size=1)
        batched = run_niah(*args, seed=2, batch_size=3)  # a batch of 3, then the cell's last 1
    assert batched == one and len(one) == 16


@pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
def test_prompt_batches_are_the_prompts_drawn_one_at_a_time(
    data_cfg: DictConfig, tokenizer: Tokenizer, processes: bool
) -> None:
    """Builders (threads, or spawned processes as beside a GPU) and token counts taken ahead
    change no prompt: each is the next needle and haystack in order, as one loop drawing them
    one at a time gets them."""
    cells, depths, n = [(128, 3), (192, 2)], (0.1, 0.7), 4
    with builder_pool(processes) as pool:
        batches = prompt_batches(tokenizer, data_cfg, cells, depths, n, seed=3, pool=pool)
        built = [s for _, _, part in batches for s in part]
    rng, texts, alone = random.Random(3), test_texts(data_cfg, seed=3), []
    for (context, _), depth in itertools.product(cells, depths):
        for _ in range(n):
            city, number = random_needle(rng)
            hay = take_haystack(texts, tokenizer, context)
            alone.append(build_sample(tokenizer, hay, city, number, context, depth,
                                      template=data_cfg.sft_prompt))  # fmt: skip
    assert built == alone and len({s.number for s in built}) > 1


def test_builders_beside_a_gpu_keep_to_the_node_s_share_of_the_cores() -> None:
    """Beside a GPU a node spawns builder processes only where its share of the cores has room
    for them (the registered GPU run: 16 workers on 16 cores, a share of 1 each); on the CPU,
    threads whatever the share."""
    assert builders_for("cuda", 1) == (False, 1)
    assert builders_for("cuda", 4) == (True, min(4, BUILDER_PROCESSES))
    assert builders_for("cuda", 64) == (True, BUILDER_PROCESSES)
    assert builders_for("cpu", 1) == builders_for("cpu", 64) == (False, BUILDERS)


def _prompts_in_builder_processes(data_cfg: DictConfig) -> None:
    """A node beside a GPU: prompts from builder processes of its own, then exit."""
    tokenizer = load_tokenizer(data_cfg)
    with builder_pool(processes=True, builders=2) as pool:
        parts = prompt_batches(tokenizer, data_cfg, [(128, 2)], (0.5,), 2, pool=pool)
        assert sum(len(part) for _, _, part in parts) == 2


def test_a_node_process_with_builder_processes_exits(data_cfg: DictConfig) -> None:
    """A node runs in a non-daemonic child process (the local executor's) and builds its NIAH
    prompts in processes of its own beside a GPU: when done, they end and the node exits. A
    pool kept for a process's life hung it there: multiprocessing joins a child's children
    before threading's exit hooks would have shut the pool down."""
    spawn = multiprocessing.get_context("spawn")
    node = spawn.Process(target=_prompts_in_builder_processes, args=(data_cfg,))
    node.start()
    node.join(timeout=300)  # ~15 s on 2 cores; a hang never ends
    if node.is_alive():
        node.kill()
    assert node.exitcode == 0


@pytest.mark.slow  # inductor compiles two graphs on the CPU: ~30 s
@pytest.mark.usefixtures("own_inductor_cache")
def test_compiled_decoding_is_eager_decoding_in_two_graphs(
    data_cfg: DictConfig, tokenizer: Tokenizer
) -> None:
    """eval.niah.compile: the same answers as eager, from one graph for the prefills of every
    prompt length and one for the decoding steps at every cache length (a graph per length
    would compile ~60 times over the paper's cells). Batches of one prompt would add a pair:
    dynamo specialises a size-1 dimension."""
    from torch._dynamo.utils import counters

    model = tiny_model("b_ssmax", seed=5)
    args = (model, tokenizer, data_cfg, [128, 192, 256], (0.1, 0.7), 4)
    graphs = counters["stats"]["unique_graphs"]
    with scaled_rope_theta(model, 50):
        eager = run_niah(*args, seed=2, batch_size=2)
        compiled = run_niah(*args, seed=2, batch_size=2, compile=True)
    assert compiled == eager and len(eager) == 24
    assert counters["stats"]["unique_graphs"] - graphs <= 2


def test_eos_is_never_chosen() -> None:
    model = tiny_model("b_ssmax", seed=2)
    bump = torch.zeros(model.cfg.vocab_size, dtype=torch.float64)
    bump[7] = 1e3  # EOS (id 7 here) is by far the most probable token everywhere
    handle = model.lm_head.register_forward_hook(lambda _m, _i, out: out + bump)
    try:
        prompt = torch.randint(0, model.cfg.vocab_size, (20,)).tolist()
        assert naive_greedy(model, prompt, 5, eos_id=None) == [7] * 5
        got = greedy_decode(model, prompt, 5, eos_id=7)
    finally:
        handle.remove()
    assert 7 not in got and got == naive_greedy(model, prompt, 5, eos_id=7)


def test_run_niah_and_grid(data_cfg: DictConfig, tokenizer: Tokenizer) -> None:
    model = tiny_model("b_ssmax").float()
    with scaled_rope_theta(model, 50):
        records = run_niah(model, tokenizer, data_cfg, [128, 256], (0.1, 0.5), 2, seed=3)
    assert len(records) == 8 and {r.score for r in records} <= set(SCORES)
    assert all(len(r.number) == 7 and r.city in CITIES for r in records)
    contexts, depths, grid = accuracy_grid(records)
    _, _, loose = accuracy_grid(records, "first_digit")
    assert contexts == [128, 256] and depths == [0.1, 0.5] and grid.shape == (2, 2)
    assert bool(((grid >= 0) & (grid <= loose) & (loose <= 1)).all())
