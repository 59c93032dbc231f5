"""How far the exported transformers model's logits are from this project's, per law.

For every variant: random weights (init_std as given; the law's s, b, p_n moved off their
init), exported with ssmax.export, loaded with transformers; max |difference| of the float32
logits and that over max |logit|, at 1x and 4x the training length, theta as trained and x50.

Usage: python bench/bench_export.py [--preset smoke] [--init-std 0.2]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from ssmax.config.compose import compose
from ssmax.evals import scaled_rope_theta
from ssmax.export.folder import write_export
from ssmax.model import Transformer
from ssmax.model.factory import model_config, variant_config

VARIANTS = sorted(p.stem for p in (Path(__file__).parents[1] / "conf" / "variant").glob("*.yaml"))


def model_of(preset: str, variant: str, std: float, cache: str) -> tuple[Transformer, object]:
    cfg = compose(f"preset={preset}", f"variant={variant}", f"paths.cache_dir={cache}",
                  f"model.init_std={std}")  # fmt: skip
    torch.manual_seed(0)
    model = Transformer(model_config(cfg), variant_config(cfg), cfg.data.seq_len).eval()
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.ndim == 1:  # norms, s, b, p_n
                p.add_(0.3 * torch.randn_like(p))
    return model, cfg


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="smoke")
    parser.add_argument("--init-std", type=float, default=0.2)
    args = parser.parse_args()
    from transformers import AutoConfig, AutoModelForCausalLM

    print("| variant | theta | length | max abs | max rel |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for variant in VARIANTS:
            model, cfg = model_of(args.preset, variant, args.init_std, f"{tmp}/cache")
            path = write_export(model, cfg.data, Path(tmp) / variant)
            n = cfg.data.seq_len
            ids = torch.randint(0, cfg.data.vocab_size, (2, 4 * n),
                                generator=torch.Generator().manual_seed(1))  # fmt: skip
            for factor in (1.0, 50.0):
                config = AutoConfig.from_pretrained(path, trust_remote_code=True)
                config.rope_parameters["rope_theta"] *= factor
                load = AutoModelForCausalLM.from_pretrained
                hf = load(path, config=config, trust_remote_code=True).eval()
                with torch.no_grad(), scaled_rope_theta(model, factor):
                    for length in (n, 4 * n):
                        ours, theirs = model(ids[:, :length]), hf(ids[:, :length]).logits
                        diff = (ours - theirs).abs().max().item()
                        rel = diff / ours.abs().max().item()
                        print(f"| {variant} | x{factor:g} | {length // n}x | {diff:.1e} | "
                              f"{rel:.1e} |")  # fmt: skip


if __name__ == "__main__":
    main()
