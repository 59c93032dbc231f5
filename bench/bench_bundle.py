"""Seeds bundled (issue 59): the pretraining step time per seed of one model trained alone
(solo) against bundles of K seeds (ssmax.model.bundle, one vmapped computation), measured in
one process on the preset's model and batch.

Each step is a whole pretraining step: each seed's loss on its own batch (LitLM.loss), backward,
the per-seed gradient clip, one AdamW step (fused on CUDA) and the LR schedule; bf16 autocast
on a GPU, as Lightning's bf16-mixed; not compiled (a solo GPU run compiles its loss: this
compares the eager solo step). Printed per contender: ms per step per seed, seeds per minute
(seeds trained per minute at the preset's max_steps) and the ratio of seeds per minute to solo.
Rounds alternate between the contenders so that drift of a shared machine hits all of them;
the median of the per-round ratios is printed.

Usage: python bench/bench_bundle.py [--preset tiny] [--device cpu|cuda] [--sizes 1,4,16,32]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import statistics
import subprocess
import time
from collections.abc import Callable

import torch

from ssmax.config.compose import compose
from ssmax.lit.lightning_module import lr_factor
from ssmax.lit.lightning_module import param_groups as solo_groups
from ssmax.model.bundle import SeedBundle, init_model, param_groups
from ssmax.model.factory import model_config, variant_config
from ssmax.model.loss import model_loss


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def batch(k: int | None, batch_size: int, seq_len: int, vocab: int, device: torch.device):  # noqa: ANN201
    g = torch.Generator().manual_seed(0)
    shape = (batch_size, seq_len + 1) if k is None else (k, batch_size, seq_len + 1)
    ids = torch.randint(0, vocab, shape, generator=g).to(device)
    return ids[..., :-1], ids[..., 1:]


def autocast(device: torch.device) -> contextlib.AbstractContextManager:
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def optimizer_for(groups: list, stage, device: torch.device):  # noqa: ANN001, ANN201
    opt = torch.optim.AdamW(groups, lr=stage.lr, betas=tuple(stage.betas), eps=stage.eps,
                            fused=device.type == "cuda")  # fmt: skip
    f = lambda s: lr_factor(s, stage.warmup_steps, stage.max_steps, stage.schedule, 0.0)  # noqa: E731
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, f)


def timed(step: Callable[[], None], device: torch.device, steps: int, warmup: int) -> float:
    """Seconds per call of step, after warmup calls."""
    for _ in range(warmup):
        step()
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    return (time.perf_counter() - start) / steps


def time_solo(cfg, device: torch.device, steps: int, warmup: int) -> float:  # noqa: ANN001
    """Seconds per step of one model: the solo run's step without Lightning."""
    stage = cfg.trainer.pretrain
    model = init_model(model_config(cfg), variant_config(cfg), cfg.data.seq_len, 0).to(device)
    opt, schedule = optimizer_for(solo_groups(model, stage.weight_decay), stage, device)
    ids, labels = batch(None, stage.batch_size, cfg.data.seq_len, cfg.data.vocab_size, device)

    def step() -> None:
        with autocast(device):
            loss = model_loss(model, ids, labels, "pretrain", cfg.trainer.loss_chunk)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), stage.grad_clip)
        opt.step()
        schedule.step()

    return timed(step, device, steps, warmup)


def time_bundle(cfg, k: int, device: torch.device, steps: int, warmup: int) -> float:  # noqa: ANN001
    """Seconds per step of a bundle of k seeds (all k seeds take that step)."""
    stage = cfg.trainer.pretrain
    bundle = SeedBundle.from_seeds(
        model_config(cfg), variant_config(cfg), cfg.data.seq_len, range(k),
        loss_chunk=cfg.trainer.loss_chunk,
    ).to(device)  # fmt: skip
    opt, schedule = optimizer_for(param_groups(bundle, stage.weight_decay), stage, device)
    ids, labels = batch(k, stage.batch_size, cfg.data.seq_len, cfg.data.vocab_size, device)

    def step() -> None:
        with autocast(device):
            loss = bundle.loss(ids, labels)
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        bundle.clip_per_seed(stage.grad_clip)
        opt.step()
        schedule.step()

    return timed(step, device, steps, warmup)


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True)  # fmt: skip
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--variant", default="b_ssmax")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", default="1,4,16,32", help="bundle sizes K")
    parser.add_argument("--steps", type=int, default=None, help="timed steps (CPU 2, GPU 20)")
    parser.add_argument("--warmup", type=int, default=1, help="steps not timed")
    parser.add_argument("--rounds", type=int, default=None, help="(CPU 2, GPU 5)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (a node's: 1)")
    args = parser.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    steps = args.steps or (20 if cuda else 2)
    rounds = args.rounds or (5 if cuda else 2)
    if not cuda:
        torch.set_num_threads(args.threads)
    cfg = compose(f"preset={args.preset}", f"variant={args.variant}")
    stage = cfg.trainer.pretrain
    sizes = [int(k) for k in args.sizes.split(",")]
    where = torch.cuda.get_device_name(device) if cuda else f"CPU, {torch.get_num_threads()} thr"
    print(f"bench_bundle {datetime.date.today().isoformat()} commit {git_commit()} torch "
          f"{torch.__version__} on {where}; preset={args.preset} variant={args.variant}: "
          f"dim {cfg.model.dim} x {cfg.model.n_layers} layers, batch {stage.batch_size} x "
          f"{cfg.data.seq_len}, {stage.max_steps} steps a run; {steps} timed steps, "
          f"{rounds} rounds")  # fmt: skip
    solo: list[float] = []
    per_seed: dict[int, list[float]] = {k: [] for k in sizes}
    ratios: dict[int, list[float]] = {k: [] for k in sizes}
    for _ in range(rounds):
        solo.append(time_solo(cfg, device, steps, args.warmup))
        for k in sizes:
            per_seed[k].append(time_bundle(cfg, k, device, steps, args.warmup) / k)
            ratios[k].append(solo[-1] / per_seed[k][-1])

    def line(name: str, seconds: float, ratio: float) -> str:
        seeds_per_min = 60 / (seconds * stage.max_steps)
        return (f"{name:>10}  {seconds * 1e3:9.1f} ms/step/seed  {seeds_per_min:8.3f} "
                f"seeds/min  x{ratio:6.2f} vs solo")  # fmt: skip

    print(line("solo", statistics.median(solo), 1.0))
    for k in sizes:
        print(line(f"bundle {k}", statistics.median(per_seed[k]), statistics.median(ratios[k])))


if __name__ == "__main__":
    main()
