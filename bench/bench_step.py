"""Training-step benchmarks, measured in one process on one model and batch.

1. The Lightning training step against a bare PyTorch loop doing the same work (the module's
   own loss: chunked LM head + cross-entropy, compiled with the model under trainer.compile;
   AdamW, LR schedule, gradient clipping; bf16 autocast in both on a GPU): throughput ratio,
   goal >= 0.95.
2. Each SSMax variant's step against softmax on the bare loop: time ratio, goal <= 1.03.
3. On a GPU: the pipeline's training path (Lightning, bf16-mixed, trainer.compile, chunked loss,
   fused AdamW, the preset's micro-batch): tokens/s and MFU against the chip's bf16 peak for
   --variants (default (a) and (b)), and each one's step time over the first's; the bare loop's
   beside them (--no-bare: not). (a)'s tokens/s is written to bench/throughput.json for `plan`
   (--no-record: not).

On a GPU only [3] runs unless --parts says otherwise.
Rounds alternate between the contenders so that drift of a shared machine hits both; the
median of per-round ratios is printed. Usage: python bench/bench_step.py [--preset tiny]
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import statistics
import subprocess
import time
import warnings
from contextlib import nullcontext

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from ssmax.config.compose import compose as make_cfg
from ssmax.config.variants import by_letter, facts, names
from ssmax.host.compiling import compile_enabled
from ssmax.lit.lightning_module import LitLM
from ssmax.model import count_parameters
from ssmax.model.factory import build_model, model_config, variant_config
from ssmax.pipeline import measured

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


def make_lit(cfg, variant: str, steps: int, compile: bool = False) -> LitLM:  # noqa: ANN001
    torch.manual_seed(0)
    c = make_cfg(f"preset={cfg.preset.name}", f"variant={variant}")
    optim = dict(c.trainer.pretrain)
    return LitLM(
        build_model(c), "pretrain", optim, steps, 10,
        compile=compile, loss_chunk=c.trainer.loss_chunk,
    )  # fmt: skip


def bare_loop(lit: LitLM, batch: dict[str, torch.Tensor], steps: int, warmup: int) -> float:
    """Seconds per step of a hand-written loop with the module's own loss (compiled or not, as
    the module was built), optimizer and schedule; bf16 autocast on a GPU, as Lightning's
    bf16-mixed."""
    device = batch["input_ids"].device
    lit.to(device)  # the LightningModule's device: configure_optimizers fuses AdamW on CUDA
    clip = lit.optim["grad_clip"]
    opt_cfg = lit.configure_optimizers()
    optimizer, schedule = opt_cfg["optimizer"], opt_cfg["lr_scheduler"]["scheduler"]
    cuda = device.type == "cuda"
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else nullcontext()
    for i in range(warmup + steps):
        if i == warmup:
            sync()
            start = time.perf_counter()
        with autocast:
            loss = lit.train_loss(batch["input_ids"], batch["labels"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lit.model.parameters(), clip)
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
    parser.add_argument("--warmup", type=int, default=5, help="steps not timed (compiling)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--no-record", action="store_true", help="do not write throughput.json")
    parser.add_argument("--variants", default="a,b", help="[3]'s laws by letter, (a) first")
    parser.add_argument("--no-bare", action="store_true", help="[3] without the bare loop")
    parser.add_argument(
        "--parts", default=None, help="which measurements, e.g. 1,2 (default: all on the CPU, 3 "
        "on a GPU, where each model compiles for ~30 s and [2] compiles 8 variants a round)"
    )  # fmt: skip
    args = parser.parse_args()
    default = "3" if torch.cuda.is_available() else "1,2,3"
    parts = {int(p) for p in (args.parts or default).split(",")}
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    cfg = make_cfg(f"preset={args.preset}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    compiled = compile_enabled(cfg.trainer.compile, device)
    batch = fixed_batch(cfg, args.batch_size or cfg.trainer.pretrain.batch_size, device)
    print(
        f"preset={args.preset} device={device} batch={tuple(batch['input_ids'].shape)} "
        f"steps={args.steps} warmup={args.warmup} rounds={args.rounds} compile={compiled}"
    )

    if 1 in parts:
        lightning_vs_bare(cfg, batch, args, compiled)
    if 2 in parts:
        variants_vs_softmax(cfg, batch, args, compiled)
    if 3 in parts and device == "cuda":
        gpu_report(cfg, batch, args, compiled)
    elif 3 in parts:
        print("\n[3] GPU tokens/s and MFU: NOT MEASURED (no CUDA device on this machine)")


def lightning_vs_bare(cfg, batch, args, compiled: bool) -> None:  # noqa: ANN001
    total = args.warmup + args.steps
    bare, lit = [], []
    for r in range(args.rounds):  # alternate which goes first
        run_bare = lambda: bare.append(  # noqa: E731
            bare_loop(make_lit(cfg, SOFTMAX, total, compiled), batch, args.steps, args.warmup)
        )
        run_lit = lambda: lit.append(  # noqa: E731
            lightning_loop(make_lit(cfg, SOFTMAX, total, compiled), batch, args.steps, args.warmup)
        )
        for run in (run_bare, run_lit) if r % 2 == 0 else (run_lit, run_bare):
            run()
    ratio = median_ratio(bare, lit)
    print(
        f"\n[1] Lightning step vs bare PyTorch loop (variant a, the same loss, precision and "
        f"compile): throughput ratio {ratio:.3f} (goal >= 0.95); median step bare "
        f"{statistics.median(bare) * 1e3:.1f} ms, lightning {statistics.median(lit) * 1e3:.1f} ms"
    )


def variants_vs_softmax(cfg, batch, args, compiled: bool) -> None:  # noqa: ANN001
    total = args.warmup + args.steps
    print("\n[2] Variant step time / softmax step time (bare loop; goal <= 1.03)")
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(args.rounds):
        for v in VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]:
            lit_v = make_lit(cfg, v, total, compiled)
            times[v].append(bare_loop(lit_v, batch, args.steps, args.warmup))
    for v in VARIANTS[1:]:
        print(f"    {v:<18} {median_ratio(times[v], times[SOFTMAX]):.3f}")


def gpu_report(cfg, batch, args, compiled: bool) -> None:  # noqa: ANN001
    """The pipeline's training path on this GPU: tokens/s and MFU (6N + 12 L d T FLOPs per
    token) of --variants (default (a) and (b)) in rounds whose order turns; (a)'s median is
    recorded for `plan` (the general path's laws, (k) and (l), count the same FLOPs: their
    MFU says how much of (a)'s speed their kernel keeps)."""
    name = torch.cuda.get_device_name()
    peak = next((v for k, v in BF16_PEAK.items() if k in name), None)
    n_params = count_parameters(model_config(cfg), variant_config(cfg), cfg.data.seq_len)
    m = cfg.model
    flops_per_token = 6 * n_params + 12 * m.n_layers * m.dim * cfg.data.seq_len
    n_tokens = batch["input_ids"].numel()
    print(f"\n[3] {name}: Lightning bf16-mixed, compile={compiled}, chunked loss, fused AdamW")
    total = args.warmup + args.steps
    laws = [by_letter()[letter.strip()] for letter in args.variants.split(",")]
    steps: dict[str, list[float]] = {v: [] for v in laws}
    for r in range(max(2, args.rounds // 2)):
        for v in laws[r % len(laws) :] + laws[: r % len(laws)]:
            lit = make_lit(cfg, v, total, compiled)
            steps[v].append(lightning_loop(lit, batch, args.steps, args.warmup))
    bare = [bare_loop(make_lit(cfg, SOFTMAX, total, compiled), batch, args.steps, args.warmup)
            for _ in range(0 if args.no_bare else max(2, args.rounds // 2))]  # fmt: skip
    rows = {**steps, **({f"{SOFTMAX} (bare loop)": bare} if bare else {})}
    for label, times in rows.items():
        tps = n_tokens / statistics.median(times)
        mfu = f"{tps * flops_per_token / peak:.1%}" if peak else "unknown peak"
        print(f"    {label:<24} {tps:,.0f} tokens/s  MFU {mfu}  peak {peak_gib():.1f} GiB")
    for v in laws[1:]:
        goal = " (goal <= 1.03)" if v == SSMAX else ""
        print(f"    {v} / {laws[0]} step time {median_ratio(steps[v], steps[laws[0]]):.3f}{goal}")
    if not args.no_record and laws[0] == SOFTMAX:
        tps = n_tokens / statistics.median(steps[SOFTMAX])
        how = (f"bench_step.py: Lightning bf16-mixed, compile={compiled}, loss chunk "
               f"{cfg.trainer.loss_chunk}, fused AdamW, torch {torch.__version__}")  # fmt: skip
        measured.record(
            None, name, cfg.model.name, "train", value=round(tps), length=cfg.data.seq_len,
            batch=batch["input_ids"].shape[0], measured=today(), commit=git_commit(), how=how,
        )  # fmt: skip
        print(f"    recorded in {measured.DEFAULT_FILE}")


def peak_gib() -> float:
    return torch.cuda.max_memory_allocated() / 2**30


def today() -> str:
    return datetime.date.today().isoformat()


def git_commit() -> str:
    """The commit measured: BENCH_COMMIT where set (the device tool's copy of the tree sits on
    a stale .git, whose HEAD is not what runs), else the checkout's short commit, "-dirty"
    when the tree differs from it ("" outside a git checkout)."""
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    cmd = ["git", "describe", "--always", "--dirty", "--abbrev=7"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else ""


if __name__ == "__main__":
    main()
