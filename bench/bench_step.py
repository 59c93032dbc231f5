"""Training-step benchmarks, measured in one process on one model and batch.

1. The Lightning training step against a bare PyTorch loop doing the same work
   (AdamW, LR schedule, gradient clipping): throughput ratio, goal >= 0.95.
2. Each SSMax variant's step against softmax on the bare loop: time ratio, goal <= 1.03.
3. On a GPU: tokens/s and MFU against the chip's bf16 peak (bf16, flash SDPA, torch.compile).

Rounds alternate between the contenders so that drift of a shared machine hits both; the
median of per-round ratios is printed. Usage: python bench/bench_step.py [--preset tiny]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
import warnings

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from ssmax.config import compose as make_cfg
from ssmax.config import model_config, variant_config
from ssmax.lit.module import LitLM, lm_loss
from ssmax.model import count_parameters
from ssmax.variants import by_letter, facts, names

# Every variant that trains its own attention law from scratch (the others reuse one's weights),
# from the variants' facts; the baseline of the ratios is (a).
VARIANTS = [v for v in names() if facts(v).start is None]
SOFTMAX, SSMAX = by_letter()["a"], by_letter()["b"]
BF16_PEAK = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # dense bf16 FLOP/s


class FixedBatches(Dataset):
    def __init__(self, batch: dict[str, torch.Tensor], n: int) -> None:
        self.batch, self.n = batch, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.batch


def make_lit(cfg, variant: str, steps: int) -> LitLM:  # noqa: ANN001
    torch.manual_seed(0)
    c = make_cfg(f"preset={cfg.preset.name}", f"variant={variant}")
    optim = dict(c.trainer.pretrain)
    return LitLM(model_config(c), variant_config(c), c.data.seq_len, "pretrain", optim, steps, 10)


def bare_loop(lit: LitLM, batch: dict[str, torch.Tensor], steps: int, warmup: int) -> float:
    """Seconds per step of a hand-written loop with the module's own optimizer and schedule."""
    model, clip = lit.model.to(batch["input_ids"].device), lit.optim["grad_clip"]
    opt_cfg = lit.configure_optimizers()
    optimizer, schedule = opt_cfg["optimizer"], opt_cfg["lr_scheduler"]["scheduler"]
    for i in range(warmup + steps):
        if i == warmup:
            sync()
            start = time.perf_counter()
        loss = lm_loss(model(batch["input_ids"]), batch["labels"], "pretrain")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        schedule.step()
    sync()
    return (time.perf_counter() - start) / steps


class StepTimer(L.Callback):
    def __init__(self, warmup: int) -> None:
        self.warmup, self.start, self.end = warmup, 0.0, 0.0

    def on_train_batch_start(self, trainer, *args) -> None:  # noqa: ANN001, ANN002
        if trainer.global_step == self.warmup:
            sync()
            self.start = time.perf_counter()

    def on_train_end(self, trainer, *args) -> None:  # noqa: ANN001, ANN002
        sync()
        self.end = time.perf_counter()


def lightning_loop(lit: LitLM, batch: dict[str, torch.Tensor], steps: int, warmup: int) -> float:
    timer = StepTimer(warmup)
    trainer = L.Trainer(
        max_steps=warmup + steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=1.0,
        callbacks=[timer],
        limit_val_batches=0,
        accelerator="auto",
        devices=1,
        precision="bf16-mixed" if torch.cuda.is_available() else "32-true",
    )
    cpu_batch = {k: v.cpu() for k, v in batch.items()}
    loader = DataLoader(FixedBatches(cpu_batch, warmup + steps), batch_size=None)
    trainer.fit(lit, loader)
    return (timer.end - timer.start) / steps


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def fixed_batch(cfg, batch_size: int, device: str) -> dict[str, torch.Tensor]:  # noqa: ANN001
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.data.vocab_size, (batch_size, cfg.data.seq_len + 1), generator=g)
    return {"input_ids": ids[:, :-1].to(device), "labels": ids[:, 1:].to(device)}


def median_ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=None)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    cfg = make_cfg(f"preset={args.preset}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    batch = fixed_batch(cfg, args.batch_size or cfg.trainer.pretrain.batch_size, device)
    n_tokens = batch["input_ids"].numel()
    print(
        f"preset={args.preset} device={device} batch={tuple(batch['input_ids'].shape)} "
        f"steps={args.steps} warmup={args.warmup} rounds={args.rounds}"
    )

    total = args.warmup + args.steps
    bare, lit = [], []
    for r in range(args.rounds):  # alternate which goes first
        run_bare = lambda: bare.append(  # noqa: E731
            bare_loop(make_lit(cfg, SOFTMAX, total), batch, args.steps, args.warmup)
        )
        run_lit = lambda: lit.append(  # noqa: E731
            lightning_loop(make_lit(cfg, SOFTMAX, total), batch, args.steps, args.warmup)
        )
        for run in (run_bare, run_lit) if r % 2 == 0 else (run_lit, run_bare):
            run()
    ratio = median_ratio(bare, lit)
    print(
        f"\n[1] Lightning step vs bare PyTorch loop (variant a): throughput ratio "
        f"{ratio:.3f} (goal >= 0.95); median step bare {statistics.median(bare) * 1e3:.1f} ms, "
        f"lightning {statistics.median(lit) * 1e3:.1f} ms"
    )

    print("\n[2] Variant step time / softmax step time (bare loop; goal <= 1.03)")
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(args.rounds):
        for v in VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]:
            times[v].append(bare_loop(make_lit(cfg, v, total), batch, args.steps, args.warmup))
    for v in VARIANTS[1:]:
        print(f"    {v:<18} {median_ratio(times[v], times[SOFTMAX]):.3f}")

    if device == "cuda":
        gpu_report(cfg, batch, n_tokens, args)
    else:
        print("\n[3] GPU tokens/s and MFU: NOT MEASURED (no CUDA device on this machine)")


def gpu_report(cfg, batch, n_tokens: int, args) -> None:  # noqa: ANN001
    """tokens/s and MFU (6 N FLOPs per token plus attention) with bf16 autocast, the flash
    SDPA kernel and torch.compile."""
    name = torch.cuda.get_device_name()
    peak = next((v for k, v in BF16_PEAK.items() if k in name), None)
    n_params = count_parameters(model_config(cfg), variant_config(cfg), cfg.data.seq_len)
    m = cfg.model
    flops_per_token = 6 * n_params + 12 * m.n_layers * m.dim * cfg.data.seq_len
    print(f"\n[3] GPU {name}: bf16 autocast, flash SDPA, torch.compile")
    for variant in (SOFTMAX, SSMAX):
        lit = make_lit(cfg, variant, 10**6)
        lit.model = torch.compile(lit.model.cuda())
        with (
            torch.autocast("cuda", dtype=torch.bfloat16),
            torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION),
        ):
            step = bare_loop(lit, batch, args.steps, args.warmup)
        tps = n_tokens / step
        mfu = f"{tps * flops_per_token / peak:.1%}" if peak else "unknown peak"
        print(f"    {variant:<10} {tps:,.0f} tokens/s  MFU {mfu}")


if __name__ == "__main__":
    main()
