"""Where a NIAH sample's time goes, measured in one run: prefill, decoding step, whole sample.

For each way of running (eager or compiled as eval.niah.compile does it, SDPA with torch's
backend order or with cuDNN first), on the preset's model with random prompts of one length:

- prefill: ms per prompt of [batch, context - 8] tokens into a fresh KV cache, and the share of
  the device's bf16 peak it reaches (forward FLOPs: 2N per token, attention 2 L d T^2 causal);
- step: ms per decoding step of the whole batch at that cache length, and the KV cache bytes it
  reads per ms (the floor of a step is reading the cache once);
- sample: ms per sample of greedy_decode_batch (prefill, then 7 steps), the rate the goal names
  (issue 19: <= 10 ms at 8k on an H100);
- the CUDA kernels of one eager decoding step, longest first (which attention kernel runs);
- building the prompts on this machine's CPU (embedded test text, GPT-2's BPE): ms per prompt,
  to hold against the sample's ms, by 1 to 8 threads and by processes (as run_niah builds
  beside a GPU), then at every context of the eval (eval.niah.context_multiples x N);
- a node's rate: run_niah end to end as an eval_niah node runs it (prompts built by builder
  processes while the device decodes, the preset's eval.niah.compile), ms per sample beside
  decoding the same prompts alone and beside builder threads: the figure a NIAH node pays,
  which bench_evals.py records for `plan`.

A way is mode:first, e.g. compiled:cudnn: eager or compiled, and the SDPA backend tried first
(torch: torch's own order; cudnn, flash, efficient, math: that one, then the others).

Ratios are against the first way (eager, torch's order) measured in the same run.
Usage: python bench/bench_niah.py [--preset paper] [--context 8192] [--batch 64]
On the CPU it runs the smoke preset at a small size: a check that the script works.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from concurrent.futures import Executor

import torch
from omegaconf import DictConfig

from ssmax.config.compose import compose
from ssmax.data.tokenizer import load_tokenizer
from ssmax.evals import niah
from ssmax.evals.inference import cache_dtype, device_autocast, model_device, sdpa_first
from ssmax.evals.niah import (
    builder_pool,
    greedy_decode_batch,
    last_hidden,
    prompt_batches,
    run_niah,
)
from ssmax.host.compiling import maybe_compile
from ssmax.model import Transformer
from ssmax.model.factory import model_config, variant_config

PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # dense TFLOP/s, by name part


def timed(fn: Callable[[], object], reps: int, device: torch.device, warm_up: bool = True) -> float:
    """Seconds per call, after one warm-up call (which compiles, when compiled) unless not."""
    if warm_up:
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps


@torch.no_grad()
def part_times(
    model: Transformer, ids: torch.Tensor, new: int, compiled: bool, reps: int
) -> tuple[float, float]:
    """Seconds of one prefill of ids [B, L] into a fresh cache, and of one decoding step at
    cache length L: the two parts of greedy_decode_batch, as eval.niah.compile runs them."""
    extend = maybe_compile(last_hidden, compiled, dynamic=True)  # as greedy_decode_batch
    length = ids.shape[1]
    cache = model.new_cache(ids.shape[0], length + new, cache_dtype(model))

    def prefill() -> None:
        cache.length = 0
        extend(model, ids, cache)

    def step() -> None:
        cache.length = length
        extend(model, ids[:, :1], cache)

    with device_autocast(model):
        return timed(prefill, reps, ids.device), timed(step, 4 * reps, ids.device)


def embedded_data(preset: str, vocab_size: int) -> DictConfig:
    """The preset's data settings on the embedded corpus (offline), with GPT-2's BPE for a
    model of GPT-2's vocabulary (the paper's)."""
    gpt2 = ["data.tokenizer=gpt2", "data.vocab_size=50257"] if vocab_size == 50257 else []
    return compose(f"preset={preset}", "data=embedded", *gpt2).data


def building_time(
    context: int, batch: int, builders: int | None, batches: int = 3, longest: int | None = None,
    processes: bool = False,
) -> float:  # fmt: skip
    """Seconds per prompt of ``context`` tokens built by prompt_batches with ``builders``
    threads or processes (after one batch), its documents counted up to ``longest`` as in an
    eval."""
    data = embedded_data("paper", 50257)
    with builder_pool(processes, builders) as pool:
        if processes:
            started(pool, builders or niah.BUILDER_PROCESSES)
        built = prompt_batches(load_tokenizer(data), data, [(context, batch)], [0.5],
                               batch * (batches + 1), pool=pool, longest=longest)  # fmt: skip
        next(built)  # the tokenizer's tables
        start = time.perf_counter()
        count = sum(len(part) for _, _, part in built)
        return (time.perf_counter() - start) / count


def started(pool: Executor, n: int, timeout: float = 300) -> None:
    """Returns once each of the ``n`` builder processes of ``pool`` has started and taken a
    task: they start on demand, each importing torch and this script (seconds), and a pool
    still starting would be timed as slow building."""
    seen, start = set(), time.perf_counter()
    while len(seen) < n and time.perf_counter() - start < timeout:
        seen |= {f.result() for f in [pool.submit(os.getpid) for _ in range(n)]}
        time.sleep(0.05)


def node_rate(
    model: Transformer, data: DictConfig, context: int, batch: int, compiled: bool,
    batches: int = 3, processes: bool = True,
) -> tuple[float, float]:  # fmt: skip
    """Seconds per sample of run_niah at ``context`` as a NIAH node runs it: prompts of the
    embedded test text built by processes (as run_niah beside a GPU) or threads while the
    device decodes ``batch`` at a time (after one call that compiles and warms; per sample of
    ``batches`` batches beyond a first); and of decoding the same prompts alone."""
    device, tokenizer = model_device(model), load_tokenizer(data)
    pool = builder_pool(processes)

    def clock(fn: Callable[[], object]) -> float:  # one call, already warm
        return timed(fn, 1, device, warm_up=False)

    samples = batches * batch

    def run(n: int, seed: int) -> object:
        return run_niah(model, tokenizer, data, [context], [0.5], n, seed, batch_size=batch,
                        compile=compiled, builders=pool)  # fmt: skip

    with pool:
        if processes:
            started(pool, niah.BUILDER_PROCESSES)
        run(batch, seed=1)  # compiles; the tokenizer's tables
        # a node's steady rate: what `batches` more batches cost, without the start every
        # call pays (the documents counted ahead) and a node's pool pays once
        node = clock(lambda: run(batch + samples, seed=0)) - clock(lambda: run(batch, seed=0))
        node /= samples
    built = prompt_batches(tokenizer, data, [(context, batch)], [0.5], samples, seed=0)
    prompts = [[s.ids for s in part] for _, _, part in built]  # run's prompts, token for token

    def decode() -> None:
        for part in prompts:
            greedy_decode_batch(model, part, 8, tokenizer.eos_id, compile=compiled)

    return node, clock(decode) / samples


def top_kernels(model: Transformer, ids: torch.Tensor, n: int = 8) -> list[str]:
    """The CUDA kernels of one eager decoding step after a prefill, longest first."""
    from torch.profiler import ProfilerActivity, profile

    cache = model.new_cache(ids.shape[0], ids.shape[1] + 1, cache_dtype(model))
    with torch.no_grad(), device_autocast(model):
        last_hidden(model, ids, cache)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            last_hidden(model, ids[:, :1], cache)
            torch.cuda.synchronize()
    events = sorted(prof.key_averages(), key=lambda e: e.device_time_total, reverse=True)
    return [f"{e.device_time_total / 1e3:8.2f} ms  x{e.count:<3} {e.key[:90]}" for e in events[:n]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=None, help="default: paper on CUDA, smoke on CPU")
    parser.add_argument("--variant", default="b_ssmax")
    parser.add_argument("--context", type=int, default=None, help="default: 8 x seq_len")
    parser.add_argument("--batch", type=int, default=None, help="default: 64 on CUDA, 2 on CPU")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--ways", default="eager:torch,eager:cudnn,eager:flash,eager:efficient,"
                        "compiled:torch,compiled:cudnn")  # fmt: skip
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    cfg = compose(f"preset={args.preset or ('paper' if cuda else 'smoke')}",
                  f"variant={args.variant}")  # fmt: skip
    torch.manual_seed(0)
    model = Transformer(model_config(cfg), variant_config(cfg), cfg.data.seq_len)
    model = model.to(device).eval()
    context, batch = args.context or 8 * cfg.data.seq_len, args.batch or (64 if cuda else 2)
    length, new = context - 8, 8
    ids = torch.randint(1, model.cfg.vocab_size, (batch, length), device=device)
    prompts = ids.tolist()
    mc = model.cfg
    # a prefill returns the last hidden state: no embedding matmul, no LM head
    body = [p for n, p in model.named_parameters() if not n.startswith(("tok_emb", "lm_head"))]
    n_params = sum(p.numel() for p in body)
    flops = batch * (2 * n_params * length + 2 * mc.n_layers * mc.dim * length**2)
    name = torch.cuda.get_device_name() if cuda else "CPU"
    peak = next((v for k, v in PEAK_BF16.items() if k in name), None)
    kv_bytes = 2 * mc.n_layers * batch * length * mc.dim * (2 if cuda else 4)
    print(f"{name}, torch {torch.__version__}, {cfg.model.name} {args.variant}, "
          f"batch {batch} x {length:,} prompt tokens + {new} new")  # fmt: skip
    print(f"{'way':<18} {'prefill ms/prompt':>18} {'of peak':>8} {'step ms':>8} "
          f"{'KV GB/s':>8} {'sample ms':>10} {'x first':>8}")  # fmt: skip
    first = None
    for way in args.ways.split(","):
        mode, order = way.split(":")
        compiled = mode == "compiled"
        torch._dynamo.reset()
        with sdpa_first(order):
            t_prefill, t_step = part_times(model, ids, new, compiled, args.reps)
            torch.cuda.empty_cache() if cuda else None  # the parts' cache, before the sample's
            t_sample = timed(
                lambda c=compiled: greedy_decode_batch(model, prompts, new, 0, compile=c),
                args.reps, device,
            ) / batch  # fmt: skip
        first = first or t_sample
        share = f"{flops / t_prefill / peak:7.1%}" if peak else "      -"
        print(f"{way:<18} {t_prefill / batch * 1e3:18.2f} {share:>8} {t_step * 1e3:8.2f} "
              f"{kv_bytes / t_step / 1e9:8.0f} {t_sample * 1e3:10.2f} "
              f"{t_sample / first:8.3f}")  # fmt: skip
    if cuda:
        print("\nkernels of one eager decoding step (torch's backend order):")
        print("\n".join(top_kernels(model, ids)))
    print(f"\nprompts of {context:,} tokens built on this CPU ({niah.BUILDERS} threads or "
          f"{niah.BUILDER_PROCESSES} processes in the eval), ms per prompt and as a multiple "
          f"of the first way's sample:")  # fmt: skip
    builders = [(n, False) for n in sorted({1, 2, 4, 8, niah.BUILDERS})]
    for n, processes in [*builders, *((n, True) for n in sorted({4, niah.BUILDER_PROCESSES}))]:
        built = building_time(context, batch, n, processes=processes)
        kind = "processes" if processes else "threads"
        print(f"  {n} {kind}: {built * 1e3:6.2f} ms  {built / first:5.2f}x")
    n, multiples = cfg.data.seq_len, cfg.eval.niah.context_multiples
    longest = int(max(multiples) * n)  # every context of the eval: short ones cost less
    contexts = [int(m * n) for m in multiples]
    print("at each context of the eval, built as run_niah builds on this device: " + ", ".join(
        f"{c:,}: {building_time(c, batch, None, longest=longest, processes=cuda) * 1e3:.2f} ms"
        for c in contexts))  # fmt: skip
    compiled = bool(cfg.eval.niah.compile)
    data = embedded_data(cfg.preset.name, mc.vocab_size)
    for processes in (True, False):
        node, alone = node_rate(model, data, context, batch, compiled, processes=processes)
        kind = f"{niah.BUILDER_PROCESSES} processes" if processes else f"{niah.BUILDERS} threads"
        print(
            f"\na NIAH node's rate at {context:,} tokens (run_niah, embedded test text, "
            f"{data.tokenizer} tokenizer, batch {batch}, compile={compiled}, builders: {kind}): "
            f"{node * 1e3:.2f} ms per sample; the same prompts decoded alone {alone * 1e3:.2f} "
            f"ms ({node / alone:.2f}x: above 1, building holds the device up)"
        )


if __name__ == "__main__":
    main()
