"""The registered GPU replication (runs.gpu of the registration; issue 59): every planned seed
at once, in this checkout, recorded seed by seed.

    python -m ssmax.registration.run gpu [--workdir DIR] [--python P] [--commit SHA]
                                         [--workers N] [--timeout-s S]

The registration's gpu run is "the same pipeline, preset and variants with
trainer.accelerator=gpu preset.hardware=gpu, at a commit whose training and eval code differs
from code_commit only by the device path and the bundling": so not a checkout of code_commit
(the cpu run's) but this one, whose commit each record names (--commit: the device tool's copy
of the tree sits on a stale .git). One pipeline invocation (command()): the seeds' pretraining
bundled on the device (executor.bundle = the number of seeds), the other nodes side by side
(local executor, --workers), not compiled, each node its own MLflow store (many at once), into
DIR/outputs-gpu, the cache (a run stopped midway goes on there). Once the report node over
those seeds has finished, each seed's record in docs/results/<name>/gpu/seed<N>.json: its
values, every node's fingerprint, commit, device, wall time and bundle, the device, the commit
and the command. Seeds already recorded are not run again; nothing here computes a verdict.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import time
from pathlib import Path

from ssmax.files.atomic import atomic_write_json
from ssmax.registration.records import nodes_of, pipeline_argv, record_path, report_over, to_run
from ssmax.registration.spec import ROOT, Registration
from ssmax.verdicts.published_file import run_file

RUN = "gpu"
GPU_WORKDIR = Path.home() / "ssmax-confirm-gpu"  # its cache; not the cpu run's folder


def command(reg: Registration, seeds: list[int], outputs: Path, python: str, workers: int,
            accelerator: str = "gpu") -> list[str]:  # fmt: skip
    """The pipeline invocation of the run (accelerator: cpu only for the CPU tests)."""
    hardware = "gpu" if accelerator == "gpu" else "cpu"
    return pipeline_argv(reg, seeds, outputs, python, f"trainer.accelerator={accelerator}",
                         f"preset.hardware={hardware}", f"executor.bundle={len(seeds)}",
                         f"executor.workers={workers}", "trainer.compile=false",
                         "tracking.mode=offline")  # fmt: skip


def device_of(nodes: dict[str, dict]) -> str:
    """The GPU the seed's nodes name most (their records' gpus), else "none"."""
    named = collections.Counter(n.get("gpus") for n in nodes.values() if n.get("gpus") != "none")
    return str(named.most_common(1)[0][0]) if named else "none"


def record_seeds(reg: Registration, outputs: Path, seeds: list[int], commit: str,
                 wall_s: float, argv: list[str]) -> list[int]:  # fmt: skip
    """Each seed's record from the report over `seeds` (none before it finished); the seeds
    recorded now."""
    results = report_over(outputs, seeds)
    if results is None:
        return []
    for seed in seeds:
        about = (f"Seed {seed} of the registered run '{RUN}' of {reg.name} (docs/registration/), "
                 f"one of {len(seeds)} run together on one device, recorded as they finished, "
                 "before any verdict of the run was computed.")  # fmt: skip
        nodes = nodes_of(outputs, seed)
        rec = run_file(results, [seed], about) | {
            "registration": reg.name, "registered_run": RUN, "seed": seed,
            "wall_s": round(wall_s, 1), "device": device_of(nodes), "commit": commit,
            "command": " ".join(argv[1:]), "nodes": nodes,
        }  # fmt: skip
        atomic_write_json(record_path(reg, RUN, seed), rec, indent=1)
    return list(seeds)


def progress(outputs: Path, seeds: list[int]) -> str:
    """How far a run got: finished nodes of these seeds per stage."""
    done = collections.Counter()
    for seed in seeds:
        for path in (outputs / "pipeline" / "nodes").glob(f"*/*/seed{seed}/*/done.json"):
            done[path.relative_to(outputs / "pipeline" / "nodes").parts[0]] += 1
    return ", ".join(f"{stage} {n}" for stage, n in sorted(done.items())) or "no node"


def head_commit() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                         text=True)  # fmt: skip
    return out.stdout.strip() or "unknown"


def run_gpu(reg: Registration, workdir: Path, python: str, commit: str | None, workers: int,
            timeout_s: float, accelerator: str = "gpu") -> int:  # fmt: skip
    """The run (module docstring); 0 when every planned seed is recorded, else 1."""
    seeds = to_run(reg, RUN)
    if not seeds:
        print(f"{reg.name} {RUN}: every planned seed is recorded")
        return 0
    outputs = workdir / "outputs-gpu"
    argv = command(reg, seeds, outputs, python, workers, accelerator)
    # the forkserver the workers fork from must not initialise CUDA: NVML answers instead
    env = os.environ | {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    print(f"{reg.name} {RUN}: {len(seeds)} seeds: {' '.join(argv[1:])}", flush=True)
    start = time.monotonic()
    with subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True) as proc:
        try:
            status = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)  # the runner ends its workers on its way out
            status = proc.wait()
            print(f"{reg.name} {RUN}: stopped after --timeout-s={timeout_s:g}", flush=True)
    wall = time.monotonic() - start
    recorded = record_seeds(reg, outputs, seeds, commit or head_commit(), wall, argv)
    print(f"{reg.name} {RUN}: pipeline exit {status} after {wall:.0f} s; nodes done: "
          f"{progress(outputs, seeds)}; {len(recorded)} of {len(seeds)} seeds recorded "
          f"in {reg.records(RUN)}")  # fmt: skip
    return 0 if len(recorded) == len(seeds) else 1
