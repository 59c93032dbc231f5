"""The attention kernel's two paths, CPU training steps measured in one process (issue 43).

1. (a) softmax and (b) SSMax before and after the general path was added: the model package of
   --before (a git ref; its src/ssmax/model, imported as `ssmax_before.model`) and this tree's,
   the same weights, batch and step (forward, cross-entropy, backward, AdamW), timed one step
   each in turn, the order swapped every step; printed: after / before, the median of the
   per-step ratios (goal: 1.00 within noise; the query-factor laws still run the fused SDPA
   path).
2. This tree's laws against (a), likewise step by step: (b), (b) sent through the general path
   (variant.path=explicit), and the rivals (k) scale-invariant p-RoPE and (l) ASEntmax (the
   general path's explicit kernel on the CPU), and issue 60's arms (n), (o) (the gate), (q),
   (r) (the sink as an extra SDPA key; (q) also through the explicit kernel) and (p) (adaptive
   temperature, inference only, trained here only to time its kernel): step time / (a)'s.

Alternating single steps makes drift of a shared machine hit both sides alike; one thread.
Usage: python bench/bench_laws.py [--before main] [--preset tiny] [--steps 40]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from ssmax.config.compose import compose
from ssmax.model import Transformer
from ssmax.model.factory import model_config, variant_config

ROOT = Path(__file__).resolve().parents[1]


def before_package(ref: str, dest: Path):  # noqa: ANN201
    """The model package of git ref ``ref`` as module ssmax_before.model (its imports of
    ssmax.model rewritten), from dest."""
    files = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", ref,
                            "src/ssmax/model/"], capture_output=True, text=True,
                           check=True).stdout.split()  # fmt: skip
    (dest / "ssmax_before" / "model").mkdir(parents=True)
    for file in files:
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{file}"],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
        text = re.sub(r"\bssmax\.model\b", "ssmax_before.model", text)
        (dest / "ssmax_before" / "model" / Path(file).name).write_text(text)
    sys.path.insert(0, str(dest))
    return importlib.import_module("ssmax_before.model")


def build(package, cfg, overrides: dict | None = None) -> Transformer:  # noqa: ANN001
    """The configured model from ``package`` (this tree's or the before one's), its variant
    built from the fields that package knows."""
    mine = dataclasses.asdict(variant_config(cfg)) | (overrides or {})
    known = {f.name for f in dataclasses.fields(package.VariantConfig)}
    variant = package.VariantConfig(**{k: v for k, v in mine.items() if k in known})
    model_cfg = package.ModelConfig(**dataclasses.asdict(model_config(cfg)))
    return package.Transformer(model_cfg, variant, cfg.data.seq_len)


class Stepper:
    """One training step of a model on a fixed batch: forward, cross-entropy, backward, AdamW."""

    def __init__(self, model: torch.nn.Module, ids: torch.Tensor) -> None:
        self.model, self.ids = model, ids
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def __call__(self) -> float:
        start = time.perf_counter()
        logits = self.model(self.ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), self.ids[:, 1:].flatten())
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return time.perf_counter() - start


def alternate(first: Stepper, second: Stepper, steps: int, warmup: int) -> list[float]:
    """second's step time / first's, step by step, the order swapped each step."""
    ratios = []
    for i in range(warmup + steps):
        if i % 2 == 0:
            a, b = first(), second()
        else:
            b, a = second(), first()
        if i >= warmup:
            ratios.append(b / a)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="main", help="git ref of the code before")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--parts", default="1,2")
    args = parser.parse_args()
    parts = {int(p) for p in args.parts.split(",")}
    torch.set_num_threads(1)
    here = importlib.import_module("ssmax.model")
    print(f"preset={args.preset} batch={args.batch}x(seq_len) steps={args.steps} "
          f"warmup={args.warmup} threads=1 before={args.before}")  # fmt: skip

    def batch(cfg) -> torch.Tensor:  # noqa: ANN001
        g = torch.Generator().manual_seed(0)
        return torch.randint(0, cfg.data.vocab_size, (args.batch, cfg.data.seq_len + 1),
                             generator=g)  # fmt: skip

    if 1 in parts:
        print("\n[1] step time after / before the general path (one process, step by step)")
        with tempfile.TemporaryDirectory() as tmp:
            old = before_package(args.before, Path(tmp))
            for name in ("a_softmax", "b_ssmax"):
                cfg = compose(f"preset={args.preset}", f"variant={name}")
                torch.manual_seed(0)
                after = build(here, cfg)
                before = build(old, cfg)
                before.load_state_dict(after.state_dict())
                ids = batch(cfg)
                ratios = alternate(Stepper(before, ids), Stepper(after, ids), args.steps,
                                   args.warmup)  # fmt: skip
                print(f"    {name:<12} {statistics.median(ratios):.3f}  (quartiles "
                      f"{statistics.quantiles(ratios, n=4)[0]:.3f}-"
                      f"{statistics.quantiles(ratios, n=4)[2]:.3f})")  # fmt: skip
    if 2 in parts:
        print("\n[2] step time / (a)'s, this tree (one process, step by step)")
        base_cfg = compose(f"preset={args.preset}", "variant=a_softmax")
        torch.manual_seed(0)
        softmax = Stepper(build(here, base_cfg), batch(base_cfg))
        for name, overrides in (("b_ssmax", {}), ("b_ssmax", {"path": "explicit"}),
                                ("k_scale_invariant", {}), ("l_asentmax", {}),
                                ("n_gated", {}), ("o_gated_ssmax", {}), ("q_sink", {}),
                                ("q_sink", {"path": "explicit"}), ("r_sink_ssmax", {}),
                                ("p_adaptive_temp_inference", {})):  # fmt: skip
            cfg = compose(f"preset={args.preset}", f"variant={name}")
            torch.manual_seed(0)
            other = Stepper(build(here, cfg, overrides), batch(cfg))
            ratios = alternate(softmax, other, max(args.steps // 4, 6), 2)
            label = name + "".join(f" {k}={v}" for k, v in overrides.items())
            print(f"    {label:<28} {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
