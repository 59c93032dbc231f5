"""Data loader throughput against what one GPU consumes at paper scale.

1. Pre-tokenized shards (data.shards_dir): the training loader of LMDataModule (memmap rows, the
   rank-aware sampler, collation) reading [16, 1024] batches.
2. Streaming, tokenizing on the fly (data=slimpajama on local files): the same documents,
   packed by PackedStream with the GPT-2 BPE.
Both run in this process (num_workers=0), so their rate is what one DataLoader worker does:
tokens per CPU-second of the process (time.process_time, all its threads: "per core") and per
wall second. Corpus: the embedded novels (data/embedded), written as SlimPajama-format jsonl.

3. Demand: one GPU training the paper's 162M model at seq 1024 takes
   MFU x peak / (6N + 12 L d T) tokens/s (the cost block of conf/pipeline.yaml: H100 bf16 dense
   989 TFLOP/s, 40% MFU); workers per GPU = that / the per-core rate, rounded up.

Usage: python bench/bench_loader.py [--tokens 5e6]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Iterator

import torch

from ssmax.config.compose import compose
from ssmax.data.corpus import embedded_jsonl
from ssmax.data.lm_module import LMDataModule
from ssmax.data.prepare import prepare
from ssmax.stages.costing import per_token


def rate(batches: Iterator[dict[str, torch.Tensor]], tokens: float) -> tuple[float, float, int]:
    """(tokens per CPU-second, tokens per wall second, tokens) over batches until ``tokens``."""
    next(batches)  # the first batch pays for opening files and starting the stream
    cpu, wall, seen = time.process_time(), time.perf_counter(), 0
    while seen < tokens:
        seen += next(batches)["input_ids"].numel()
    return seen / (time.process_time() - cpu), seen / (time.perf_counter() - wall), seen


def endless(dm: LMDataModule) -> Iterator[dict[str, torch.Tensor]]:
    while True:  # the map-style loader ends with its epoch; the stream does not
        yield from dm.train_dataloader()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=float, default=5e6, help="tokens to time per loader")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        base = ["preset=paper", f"paths.cache_dir={tmp}/cache"]
        cfg = compose(*base)
        files = f"[{embedded_jsonl(cfg.data)}]"  # one file, split by document hash
        data = [*base, f"data.slimpajama_files={files}", "data.val_fraction=0.02",
                "data.test_fraction=0.02", f"data.shards_dir={tmp}/shards",
                "data.prepare_num_proc=1"]  # fmt: skip
        cfg = compose(*data)
        start = time.perf_counter()
        prepare(cfg)
        print(
            f"prepared GPT-2 shards of the embedded corpus in {time.perf_counter() - start:.1f} s"
        )
        batch = int(cfg.trainer.pretrain.batch_size)
        shards = LMDataModule(cfg.data, batch, seed=0)
        stream_cfg = compose(*data[:-2])  # the same files, no shards: tokenized on the fly
        stream = LMDataModule(stream_cfg.data, batch, seed=0)
        rates = {}
        for name, dm in (("shards (memmap)", shards), ("streaming (tokenize)", stream)):
            dm.setup("fit")
            per_cpu, per_wall, seen = rate(endless(dm), args.tokens)
            rates[name] = per_cpu
            print(f"[{len(rates)}] {name:<21} {per_cpu:>12,.0f} tokens per CPU-second "
                  f"({per_wall:,.0f} per wall second; {seen:,} tokens in [{batch}, "
                  f"{cfg.data.seq_len}] batches)")  # fmt: skip

    flops, n = per_token(cfg, cfg.data.seq_len, training=True)
    c = compose("preset=paper", config_name="pipeline").cost
    demand = float(c.peak_flops) * float(c.mfu) / flops
    six_n = float(c.peak_flops) * float(c.mfu) / (6 * n)
    print(f"\n[3] one {c.gpu} GPU at {float(c.mfu):.0%} MFU trains the paper model (N = {n:,}, "
          f"T = {cfg.data.seq_len}) on {demand:,.0f} tokens/s "
          f"= {float(c.mfu):.2f} x {float(c.peak_flops):.3g} / (6N + 12 L d T = {flops:.4g} "
          f"FLOPs/token); with 6N alone {six_n:,.0f}")  # fmt: skip
    for name, per_cpu in rates.items():
        print(f"    {name:<21} {demand / per_cpu:6.2f} cores of loading per GPU "
              f"-> data.num_workers >= {math.ceil(demand / per_cpu)}")  # fmt: skip


if __name__ == "__main__":
    main()
