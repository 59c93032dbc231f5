"""Seeds bundled, the evals (issue 59): a variant's eval nodes (eval_loss; eval_niah with the
needle scores and the copy probe) of K seeds run solo, each node in its own worker process
(`executor=local`, as a pipeline runs them), against the same nodes as bundles
(`executor.bundle=K`: each stage's seeds one after another in one worker), in one run, from the
same inputs.

The inputs (pretraining, SFT) are made once with few steps (--pretrain-steps, a small SFT set):
an eval's time does not depend on how trained its weights are (NIAH decodes a fixed number of
tokens). Then, per round and contender, a copy of that folder and one `python -m ssmax.pipeline
run` of the evals, timed as a whole, and again with every node cached (planning, the pipeline's
MLflow run: what both pay); the evals' time is the difference. Beside it, the time the nodes'
records count: their stages' own, without their process's start or their MLflow run's opening
(in a bundle each seed still opens its own). --compile: after one untimed run that fills
inductor's on-disk cache, from which each solo process still compiles its graphs (dynamo traces
again in every process). Printed per contender: seconds per seed (both stages), seeds per
minute and the ratio to solo (median over rounds, which alternate between contenders so that
drift of a shared machine hits both).

Usage: python bench/bench_bundle_evals.py [--preset smoke] [--device cpu|cuda] [--seeds 4]
       [--workers 1,4] [--compile] [--rounds 2] [--input-workers 1]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

EVALS = "pipeline.targets=[eval_loss,eval_niah]"


def pipeline(folder: Path, base: list[str], *extra: str) -> float:
    """Seconds of one pipeline command (a failure stops the benchmark, its output shown)."""
    argv = [sys.executable, "-m", "ssmax.pipeline", "run", f"paths.output_dir={folder}", *base,
            *extra]  # fmt: skip
    # CUDA's availability read through NVML: the forkserver the workers fork from must not
    # initialise CUDA (scripts/gpu_bench.sh's replicate does the same)
    env = os.environ | {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(argv)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def evals_s(inputs: Path, base: list[str], extra: list[str]) -> tuple[float, float]:
    """The evals' seconds in a copy of the inputs' folder: the run, less a rerun that finds
    them cached; and the seconds their records count (each node's stage alone)."""
    with tempfile.TemporaryDirectory(prefix="bench-evals-") as tmp:
        folder = Path(tmp) / "out"
        shutil.copytree(inputs, folder)
        run = pipeline(folder, base, EVALS, *extra)
        records = (folder / "pipeline" / "nodes").glob("eval_*/*/*/*/done.json")
        staged = sum(json.loads(r.read_text())["wall_s"] for r in records)
        return run - pipeline(folder, base, EVALS, *extra), staged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smoke")
    parser.add_argument("--variant", default="b_ssmax")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seeds", type=int, default=4, help="K: seeds, one bundle of them")
    parser.add_argument("--workers", default="1", help="executor.workers to compare at")
    parser.add_argument("--compile", action="store_true", help="the evals compiled")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pretrain-steps", type=int, default=10)
    parser.add_argument("--sft-examples", type=int, default=64)
    parser.add_argument("--input-workers", type=int, default=1, help="local workers, inputs")
    parser.add_argument("--dir", default=None, help="the inputs' folder (kept; default: temp)")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    seeds = list(range(args.seeds))
    base = [f"preset={args.preset}", f"pipeline.variants=[{args.variant}]",
            f"pipeline.seeds=[{','.join(map(str, seeds))}]",
            f"trainer.pretrain.max_steps={args.pretrain_steps}",
            f"trainer.pretrain.warmup_steps={min(4, args.pretrain_steps)}",
            f"data.sft_num_examples={args.sft_examples}", "trainer.val_batches=1",
            f"trainer.compile={str(args.compile).lower()}",
            f"eval.niah.compile={str(args.compile).lower()}"]  # fmt: skip
    if cuda:  # as the registered GPU run (ssmax.registration.gpu)
        base += ["trainer.accelerator=gpu", "preset.hardware=gpu", "trainer.cpu_isa=null",
                 "tracking.mode=offline"]  # fmt: skip
    where = torch.cuda.get_device_name() if cuda else "CPU"
    print(f"bench_bundle_evals {datetime.date.today().isoformat()} torch {torch.__version__} "
          f"on {where}; preset={args.preset} variant={args.variant}, {args.seeds} seeds, "
          f"compile={args.compile}, {args.rounds} rounds", flush=True)  # fmt: skip
    inputs = Path(args.dir or tempfile.mkdtemp(prefix="bench-evals-inputs-")) / "out"
    side = ["executor=local", f"executor.workers={args.input_workers}"]
    side = side if args.input_workers > 1 else []  # SFT side by side
    made = pipeline(inputs, base, "pipeline.targets=[rope_pretrained,rope_sft]",
                    f"executor.bundle={args.seeds}", *side)  # fmt: skip
    print(f"inputs: {made:.1f} s ({inputs})", flush=True)
    if args.compile:  # inductor's on-disk cache filled first: every contender starts warm
        warm, _ = evals_s(inputs, base, [f"executor.bundle={args.seeds}"])
        print(f"compile, untimed: {warm:.1f} s", flush=True)
    for workers in [int(w) for w in args.workers.split(",")]:
        local = ["executor=local", f"executor.workers={workers}"]
        solo: list[tuple[float, float]] = []
        bundled: list[tuple[float, float]] = []
        for _ in range(args.rounds):
            solo.append(evals_s(inputs, base, local))
            bundled.append(evals_s(inputs, base, [*local, f"executor.bundle={args.seeds}"]))
        ratio = statistics.median(s[0] / b[0] for s, b in zip(solo, bundled, strict=True))
        size = -(-args.seeds // workers)  # ssmax.pipeline.bundle.group.chunk: a bundle a worker
        for name, times, x in (("solo", solo, 1.0), (f"bundles of {size}", bundled, ratio)):
            per_seed = statistics.median(t for t, _ in times) / args.seeds
            staged = statistics.median(s for _, s in times) / args.seeds
            print(f"workers {workers:>2} {name:>13}  {per_seed:7.2f} s/seed (both evals; "
                  f"{staged:.2f} in the stages)  {60 / per_seed:7.2f} seeds/min  "
                  f"x{x:5.2f} vs solo  [{', '.join(f'{t:.1f}' for t, _ in times)} s]",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
