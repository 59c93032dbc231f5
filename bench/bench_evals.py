"""Eval benchmarks on one model, measured in one run.

1. Peak memory of the per-position loss eval at 1x, 5x, 10x, 20x the training length, each in a
   fresh process (peak RSS growth over the process's start): goal roughly linear, never
   quadratic.
2. Greedy decoding with the KV cache against re-running the full context for every new token,
   at 8x the training length: goal >= 5x faster.
3. On a GPU (instead of 1 and 2), the evals as the pipeline runs them on the preset's model
   (bf16, batch auto, trainer.compile): ms per Fig. 5 sequence of eval.loss.max_multiple x N + 1
   tokens (goal at paper scale <= 100 ms per 20,001 tokens) and ms per NIAH sample at 8x N as a
   node runs it, its prompts built beside the decoding (goal <= 10 ms), both written to
   bench/throughput.json for `plan` (--no-record: not).

Usage: python bench/bench_evals.py [--preset tiny] [--train-len 1024] [--vocab 50257]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch
from omegaconf import DictConfig

from ssmax.config.compose import compose
from ssmax.evals import niah
from ssmax.evals.inference import sdpa_first
from ssmax.evals.niah import greedy_decode, niah_batch
from ssmax.evals.per_position_loss import auto_batch, per_position_loss
from ssmax.host.compiling import compile_enabled
from ssmax.model import Transformer
from ssmax.model.factory import model_config, variant_config
from ssmax.pipeline import measured


def build(preset: str, variant: str, vocab: int | None, train_len: int) -> Transformer:
    torch.manual_seed(0)
    cfg = compose(f"preset={preset}", f"variant={variant}")
    mcfg = model_config(cfg)
    if vocab:
        mcfg.vocab_size = vocab
    return Transformer(mcfg, variant_config(cfg), train_len).eval()


def loss_memory(args: argparse.Namespace, length: int) -> dict[str, float]:
    """Runs in its own process: peak RSS growth of one per-position loss pass."""
    model = build(args.preset, args.variant, args.vocab, args.train_len)
    ids = torch.randint(0, model.cfg.vocab_size, (1, length + 1))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    per_position_loss(model, ids)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"mib": (peak - before) / 1024, "seconds": seconds}


def decode_speed(args: argparse.Namespace) -> tuple[float, float]:
    model = build(args.preset, args.variant, args.vocab, args.train_len)
    prompt = torch.randint(0, model.cfg.vocab_size, (8 * args.train_len,)).tolist()
    start = time.perf_counter()
    with torch.no_grad():
        cached = greedy_decode(model, prompt, args.new_tokens, eos_id=0)
    with_cache = time.perf_counter() - start
    ids, rerun = list(prompt), []
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(args.new_tokens):  # the whole context again for every token
            logits = model(torch.tensor([ids]))[0, -1]
            logits[0] = float("-inf")  # same rule as greedy_decode: never EOS
            ids.append(int(logits.argmax()))
            rerun.append(ids[-1])
    without = time.perf_counter() - start
    assert cached == rerun, "cached and full-context decoding disagree"
    return with_cache, without


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--variant", default="b_ssmax")
    parser.add_argument("--train-len", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=50257, help="GPT-2 size: chunking matters")
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--no-record", action="store_true", help="do not write throughput.json")
    parser.add_argument("--child-length", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_length:
        print(json.dumps(loss_memory(args, args.child_length)))
        return

    print(f"preset={args.preset} variant={args.variant} N={args.train_len} vocab={args.vocab}")
    if torch.cuda.is_available():  # [1] and [2] are CPU checks: minutes on the paper model
        gpu_rates(args)
        return
    print("\n[1] per-position loss: peak RSS growth (fresh process per length)")
    base = None
    for k in (1, 5, 10, 20):
        length = k * args.train_len
        out = subprocess.run(
            [sys.executable, __file__, *sys.argv[1:], "--child-length", str(length)],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        base = base or max(r["mib"], 1e-6)
        print(
            f"    {k:>2}x ({length:>6} tokens): {r['mib']:8.1f} MiB  x{r['mib'] / base:5.2f} "
            f"of 1x (length x{k})  {r['seconds']:.1f} s"
        )

    with_cache, without = decode_speed(args)
    print(
        f"\n[2] greedy decoding of {args.new_tokens} tokens at 8x ({8 * args.train_len} tokens): "
        f"KV cache {with_cache:.2f} s, full re-run {without:.2f} s -> "
        f"{without / with_cache:.1f}x faster (goal >= 5x)"
    )
    print("\n[3] GPU eval rates: NOT MEASURED (no CUDA device on this machine)")


def gpu_rates(args: argparse.Namespace) -> None:
    """ms per Fig. 5 sequence and per NIAH sample on the preset's own model and lengths,
    with the preset's eval settings (eval.sdpa_first, eval.niah.compile)."""
    cfg = compose(f"preset={args.preset}", "variant=b_ssmax")
    with sdpa_first(cfg.eval.sdpa_first):
        measure_gpu_rates(args, cfg)


def measure_gpu_rates(args: argparse.Namespace, cfg: DictConfig) -> None:
    from bench_niah import embedded_data, node_rate  # a NIAH node's rate, as it runs
    from bench_step import git_commit, today  # the same provenance as the training rate

    torch.manual_seed(0)
    model = Transformer(model_config(cfg), variant_config(cfg), cfg.data.seq_len).cuda().eval()
    name, n = torch.cuda.get_device_name(), cfg.data.seq_len
    compiled = compile_enabled(cfg.trainer.compile, "cuda")
    length = round(n * float(cfg.eval.loss.max_multiple)) + 1
    batch = auto_batch(model, length)
    seqs = torch.randint(0, model.cfg.vocab_size, (3 * batch, length))
    per_position_loss(model, seqs[:batch], batch_size=batch, compile=compiled)  # compile, warm
    torch.cuda.synchronize()
    start = time.perf_counter()
    per_position_loss(model, seqs[batch:], batch_size=batch, compile=compiled)
    torch.cuda.synchronize()
    loss_s = (time.perf_counter() - start) / (2 * batch)
    del seqs  # a NIAH node runs in a process of its own: not beside the loss eval's blocks
    torch.cuda.empty_cache()
    context, niah_compiled = 8 * n, bool(cfg.eval.niah.compile)
    step = niah_batch(model, "auto", 1000, context)  # a node's batch at the paper's 1,000 a cell
    data = embedded_data(args.preset, model.cfg.vocab_size)
    niah_s, alone_s = node_rate(model, data, context, step, niah_compiled)
    print(f"\n[3] {name}, {cfg.model.name}, bf16, compile={compiled}")
    print(f"    per-position loss: {loss_s * 1e3:.1f} ms per sequence of {length:,} tokens "
          f"(batch {batch}; paper-scale goal <= 100 ms)")  # fmt: skip
    print(f"    NIAH: {niah_s * 1e3:.1f} ms per sample at {context:,} tokens as a node runs it "
          f"(prompts built beside the decoding; decoding alone {alone_s * 1e3:.1f} ms; batch "
          f"{step}, compile={niah_compiled}; goal <= 10 ms; parts: bench_niah.py)")  # fmt: skip
    if not args.no_record:
        common = {"measured": today(), "commit": git_commit()}

        def how(compiled: bool) -> str:
            return (f"bench_evals.py: bf16, compile={compiled}, sdpa_first="
                    f"{cfg.eval.sdpa_first}, torch {torch.__version__}")  # fmt: skip

        measured.record(None, name, cfg.model.name, "eval_loss", value=loss_s, length=length,
                        batch=batch, how=how(compiled), **common)  # fmt: skip
        how_niah = (f"{how(niah_compiled)}, run_niah: embedded text, {data.tokenizer} tokenizer, "
                    f"{niah.BUILDER_PROCESSES} builder processes, 8 new tokens")  # fmt: skip
        measured.record(None, name, cfg.model.name, "niah", value=niah_s, length=context,
                        batch=step, how=how_niah, **common)  # fmt: skip
        print(f"    recorded in {measured.DEFAULT_FILE}")


if __name__ == "__main__":
    main()
