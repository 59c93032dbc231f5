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
(local executor, --workers, the lowest seed first: a loan's end leaves whole seeds), not
compiled, not tracked (tracking.enabled=false: a loan's MLflow stores go with its machine,
and 48 seeds' ~2,100 node stores merged for the report and at the run's end cost minutes:
~0.9 s a node here; the records and the report come from the nodes' own files), into
DIR/outputs-gpu, the cache (a run stopped midway goes on there). Once the report node over
those seeds has finished, each seed's record in docs/results/<name>/gpu/seed<N>.json: its
values, every node's fingerprint, commit, device, wall time and bundle, the device, the commit
and the command. Seeds already recorded are not run again; nothing here computes a verdict.

A loan ends the machine and its cache with it: with --timeout-s the pipeline is stopped
REPORT_RESERVE_S before it, and where it had not finished, the seeds whose every node did
(finished_seeds) get the report over them (the same pipeline over those seeds: every node
cached but the report) and their records, so that a loan too short for all the seeds keeps
those it finished and the next one runs the rest.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import time
from pathlib import Path

from ssmax.files.atomic import atomic_write_json
from ssmax.pipeline import declaration
from ssmax.pipeline.dag import build_dag, upstream
from ssmax.registration.records import nodes_of, pipeline_argv, report_over
from ssmax.verdicts.published_file import run_file
from ssmax.verdicts.registered import ROOT, Registration, record_path, to_run

RUN = "gpu"
GPU_WORKDIR = Path.home() / "ssmax-confirm-gpu"  # its cache; not the cpu run's folder
# of --timeout-s, kept for the report over the seeds that finished: the pipeline's start and
# plan over them (~30 s for 48 seeds of the paper pipeline on a Xeon core), the report node
REPORT_RESERVE_S = 90.0


def command(reg: Registration, seeds: list[int], outputs: Path, python: str, workers: int,
            accelerator: str = "gpu") -> list[str]:  # fmt: skip
    """The pipeline invocation of the run (accelerator: cpu only for the CPU tests)."""
    hardware = "gpu" if accelerator == "gpu" else "cpu"
    return pipeline_argv(reg, seeds, outputs, python, f"trainer.accelerator={accelerator}",
                         f"preset.hardware={hardware}", f"executor.bundle={len(seeds)}",
                         f"executor.workers={workers}", "executor.order=seed",
                         "trainer.compile=false", "tracking.enabled=false")  # fmt: skip


def device_of(nodes: dict[str, dict]) -> str:
    """The GPU the seed's nodes name most (their records' gpus), else "none"."""
    named = collections.Counter(n.get("gpus") for n in nodes.values() if n.get("gpus") != "none")
    return str(named.most_common(1)[0][0]) if named else "none"


def record_seeds(reg: Registration, outputs: Path, seeds: list[int], commit: str,
                 wall_s: float, argv: list[str], together: int = 0) -> list[int]:  # fmt: skip
    """Each seed's record from the report over `seeds` (none before it finished); the seeds
    recorded now. together: how many seeds the run trained at once (default: these)."""
    results = report_over(outputs, seeds)
    if results is None:
        return []
    for seed in seeds:
        about = (f"Seed {seed} of the registered run '{RUN}' of {reg.name} (docs/registration/), "
                 f"one of {together or len(seeds)} run together on one device, recorded as "
                 "they finished, before any verdict of the run was computed.")  # fmt: skip
        nodes = nodes_of(outputs, seed)
        rec = run_file(results, [seed], about) | {
            "registration": reg.name, "registered_run": RUN, "seed": seed,
            "wall_s": round(wall_s, 1), "device": device_of(nodes), "commit": commit,
            "command": " ".join(argv[1:]), "nodes": nodes,
        }  # fmt: skip
        atomic_write_json(record_path(reg, RUN, seed), rec, indent=1)
    return list(seeds)


def finished_seeds(reg: Registration, outputs: Path, seeds: list[int]) -> list[int]:
    """The seeds whose every node the report reads, and every node those read, has a done
    record in outputs (the DAG from the declaration alone: nothing is composed)."""
    dag = build_dag(declaration.load(reg.pipeline), list(reg.variants), seeds)
    nodes = outputs / "pipeline" / "nodes"
    done = {str(p.parent.parent.relative_to(nodes)) for p in nodes.glob("*/*/seed*/*/done.json")}
    report = list(dag.values())[-1]  # the last node reads every seed's leaves
    return [
        seed
        for seed in seeds
        if upstream(dag, {n for n in report.inputs if n.endswith(f"/seed{seed}")}) <= done
    ]


def _pipeline(argv: list[str], timeout_s: float | None) -> int:
    """One pipeline invocation, stopped (SIGTERM to its group) after timeout_s."""
    # the forkserver the workers fork from must not initialise CUDA: NVML answers instead
    env = os.environ | {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    with subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True) as proc:
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)  # the runner ends its workers on its way out
            proc.wait()
            print(f"stopped after {timeout_s:.0f} s", flush=True)
            return -signal.SIGTERM


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
            timeout_s: float | None, accelerator: str = "gpu") -> int:  # fmt: skip
    """The run (module docstring); 0 when every planned seed is recorded, else 1."""
    seeds = to_run(reg, RUN)
    if not seeds:
        print(f"{reg.name} {RUN}: every planned seed is recorded")
        return 0
    outputs = workdir / "outputs-gpu"
    argv = command(reg, seeds, outputs, python, workers, accelerator)
    print(f"{reg.name} {RUN}: {len(seeds)} seeds: {' '.join(argv[1:])}", flush=True)
    start = time.monotonic()
    end = None if timeout_s is None else start + timeout_s

    def until(reserve: float = 0.0) -> float | None:  # seconds left of --timeout-s, less reserve
        return None if end is None else max(1.0, end - time.monotonic() - reserve)

    status = _pipeline(argv, until(REPORT_RESERVE_S))
    wall = time.monotonic() - start
    commit = commit or head_commit()
    recorded = record_seeds(reg, outputs, seeds, commit, wall, argv)
    done = [] if recorded else finished_seeds(reg, outputs, seeds)
    if done:  # stopped or failed before the report: the report over the seeds that finished
        print(f"{reg.name} {RUN}: the report over the {len(done)} seeds that finished", flush=True)
        again = command(reg, done, outputs, python, workers, accelerator)
        _pipeline(again, until())
        recorded = record_seeds(reg, outputs, done, commit, wall, argv, together=len(seeds))
    print(f"{reg.name} {RUN}: pipeline exit {status} after {wall:.0f} s; nodes done: "
          f"{progress(outputs, seeds)}; {len(recorded)} of {len(seeds)} seeds recorded "
          f"in {reg.records(RUN)}")  # fmt: skip
    return 0 if len(recorded) == len(seeds) else 1
