"""trainer.cpu_isa (ssmax.host.cpu_isa): a pretraining node gives the same weights, bit for bit,
whatever the CPU's kernels would have been and however many cores the node could have had. Another
CPU is stood in for by the variables that steer PyTorch's, MKL's and oneDNN's dispatch (here an
AVX-512 CPU; a CPU without it takes other code the same way) and by the node's threads (2 or 1: what
the local executor gives a node on 2 cores with 1 or 2 workers). The node runs in the pipeline's own
process (executor=inprocess, threads from OMP_NUM_THREADS): a local worker's forkserver would import
the stages again first (~12 s a run), and the threads a node gets are the same either way
(ssmax.pipeline.run.execute_node)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # four smoke pretrainings in fresh processes: ~1 min

# What a CPU without AVX-512 (and one without AVX2's MKL path) would pick on its own.
OTHER_CPU = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
             "ONEDNN_MAX_CPU_ISA": "SSE41"}  # fmt: skip


def pretrained(
    out: Path, cache: Path, isa: str, threads: int, env: dict[str, str]
) -> dict[str, torch.Tensor]:
    """The weights of a smoke pretraining node run by the pipeline in a fresh process."""
    clean = {k: v for k, v in os.environ.items() if k not in OTHER_CPU}
    cmd = [sys.executable, "-m", "ssmax.pipeline", "run", "preset=smoke",
           "pipeline.variants=[a_softmax]", "pipeline.targets=[pretrain]", "executor=inprocess",
           f"trainer.cpu_isa={isa}", "tracking.enabled=false", f"paths.output_dir={out}",
           f"paths.cache_dir={cache}"]  # fmt: skip
    env = {**clean, **env, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (weights,) = out.glob("pipeline/nodes/pretrain/a_softmax/seed0/*/model.pt")
    return torch.load(weights, map_location="cpu")


def same_bits(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_pinned_runs_match_bit_for_bit_across_dispatch_and_threads(
    tmp_path: Path, shared_cache: Path
) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 cores: a node of 2 threads against one of 1")
    here = pretrained(tmp_path / "a", shared_cache, "avx2", threads=2, env={})
    there = pretrained(tmp_path / "b", shared_cache, "avx2", threads=1, env=OTHER_CPU)
    assert same_bits(here, there)
    # the control: unpinned, the same two set-ups part in their low bits
    here = pretrained(tmp_path / "c", shared_cache, "null", threads=2, env={})
    there = pretrained(tmp_path / "d", shared_cache, "null", threads=1, env=OTHER_CPU)
    assert not same_bits(here, there)
