"""Where RoPE theta x50 takes the retrieval skill away at the training length: a diagnostic of
finished pipeline nodes (issue: the tiny preset's needle claims are inconclusive because NIAH
at 1x collapses under theta x50 for every variant).

For each node folder given (a pretrain, switch or sft node: its config.yaml and model.pt), at
each RoPE factor (default 1 and 50), teacher-forced on the validation rows of the planted-fact
language at the training length:
- recall: asked values whose every token is the argmax (val/fact_recall);
- by token of the value (the BPE splits " 48213" into " ", "4", "8", ...): the share right.

    python scripts/theta_probe.py /work/runs/base/pipeline/nodes/pretrain/b_ssmax/seed0/*/ ...

Prints one table row per node and factor; --json writes them too. ``--niah K`` (for sft nodes)
adds the needle test at the eval's first three context multiples at each factor (1x, 2x, 4x the
training length in the tiny preset), K prompts a depth,
scored as eval_niah scores them (full: the reply starts with the number).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf

from ssmax.config.compose import compose
from ssmax.data.lm_module import LMDataModule
from ssmax.data.tokenizer import load_tokenizer
from ssmax.evals.inference import scaled_rope_theta
from ssmax.evals.niah import builder_pool, run_niah
from ssmax.stages.context import load_model

MAX_TOKENS = 10  # " " + up to 8 digits + "." is never asked; 9 positions suffice


@torch.no_grad()
def probe(node: Path, factors: list[float], rows: int) -> list[dict]:
    cfg = OmegaConf.load(node / "config.yaml")
    model = load_model(cfg, str(node / "model.pt"))
    dm = LMDataModule(cfg.data, batch_size=32, seed=int(cfg.seed))
    dm.prepare_data()
    dm.setup("validate")
    batches = []
    for batch in dm.val_dataloader():
        batches.append(batch)
        if sum(b["input_ids"].shape[0] for b in batches) >= rows:
            break
    out = []
    for factor in factors:
        by_pos = torch.zeros(MAX_TOKENS)
        seen = torch.zeros(MAX_TOKENS)
        hits = asked = 0
        with scaled_rope_theta(model, factor):
            for batch in batches:
                logits = model(batch["input_ids"])
                right = logits.argmax(-1) == batch["labels"]
                answer = batch["answer"]
                for b in range(answer.shape[0]):
                    for q in range(1, int(answer[b].max()) + 1):
                        where = (answer[b] == q).nonzero().flatten()
                        if where.numel() == 0:
                            continue
                        ok = right[b, where]
                        asked += 1
                        hits += bool(ok.all())
                        k = min(len(ok), MAX_TOKENS)
                        by_pos[:k] += ok[:k].float()
                        seen[:k] += 1
        share = (by_pos / seen.clamp(min=1)).tolist()
        out.append({
            "node": str(node), "factor": factor, "asked": asked, "recall": hits / max(asked, 1),
            "by_token": [round(s, 3) for s, n in zip(share, seen.tolist(), strict=True) if n > 0],
        })  # fmt: skip
    return out


def niah(node: Path, factors: list[float], samples: int) -> dict[float, dict[float, float]]:
    """factor -> {multiple: full accuracy} at the eval's first three context multiples (1x,
    2x, 4x in the tiny preset), its depths and the node's seed."""
    cfg = OmegaConf.load(node / "config.yaml")
    model, tokenizer = load_model(cfg, str(node / "model.pt")), load_tokenizer(cfg.data)
    n, out = int(cfg.data.seq_len), {}
    settings = OmegaConf.select(cfg, "eval.niah")  # a training node saves its own keys only
    settings = settings or compose(f"preset={cfg.preset.name}", config_name="pipeline").eval.niah
    multiples = list(settings.context_multiples)[:3]
    with builder_pool(False) as builders:
        for factor in factors:
            with scaled_rope_theta(model, factor):
                records = run_niah(
                    model, tokenizer, cfg.data, [round(m * n) for m in multiples],
                    list(settings.depths), samples, seed=int(cfg.seed),
                    answer_tokens=settings.max_new_tokens, batch_size=settings.batch_size,
                    compile=False, builders=builders,
                )  # fmt: skip
            out[factor] = {
                m: sum(r.score == "full" for r in cell) / len(cell)
                for m in multiples
                for cell in [[r for r in records if r.context == round(m * n)]]
            }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nodes", nargs="+", type=Path, help="node folders (config.yaml, model.pt)")
    parser.add_argument("--factors", type=float, nargs="+", default=[1.0, 50.0])
    parser.add_argument("--rows", type=int, default=256, help="validation rows (default 256)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--niah", type=int, metavar="K", help="NIAH too, K prompts a depth")
    args = parser.parse_args(argv)
    for node in args.nodes:
        if not (node / "config.yaml").is_file() or not (node / "model.pt").is_file():
            print(f"theta_probe: {node} has no config.yaml and model.pt (a node's folder)",
                  file=sys.stderr)  # fmt: skip
            return 2
    torch.set_num_threads(1)
    rows = []
    for node in args.nodes:
        for r in probe(node, args.factors, args.rows):
            rows.append(r)
            name = "/".join(node.resolve().parts[-4:-1])
            print(f"{name:36s} x{r['factor']:<4g} recall {r['recall']:.3f} ({r['asked']} asked)"
                  f"  by token {r['by_token']}", flush=True)  # fmt: skip
        if args.niah:
            for factor, acc in niah(node, args.factors, args.niah).items():
                rows.append({"node": str(node), "factor": factor, "niah": acc})
                cells = "  ".join(f"{m}x {a:.2f}" for m, a in acc.items())
                print(f"{name:36s} x{factor:<4g} NIAH full {cells}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
