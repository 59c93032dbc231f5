"""trainer.cpu_isa (ssmax.cpu): a pretraining node gives the same weights, bit for bit, whatever
the CPU's kernels would have been and however many cores the node could have had. Another CPU
is stood in for by the variables that steer PyTorch's, MKL's and oneDNN's dispatch (here an
AVX-512 CPU; a CPU without it takes other code the same way) and by the local executor's
threads per node (cores / workers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # four smoke pretrainings in fresh processes: ~1.5 min

# What a CPU without AVX-512 (and one without AVX2's MKL path) would pick on its own.
OTHER_CPU = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
             "ONEDNN_MAX_CPU_ISA": "SSE41"}  # fmt: skip


def pretrained(out: Path, isa: str, workers: int, env: dict[str, str]) -> dict[str, torch.Tensor]:
    """The weights of a smoke pretraining node run by the pipeline in a fresh process."""
    clean = {k: v for k, v in os.environ.items() if k not in OTHER_CPU}
    cmd = [sys.executable, "-m", "ssmax.pipeline", "run", "preset=smoke",
           "pipeline.variants=[a_softmax]", "pipeline.targets=[pretrain]", "executor=local",
           f"executor.workers={workers}", f"trainer.cpu_isa={isa}", "tracking.enabled=false",
           f"paths.output_dir={out}"]  # fmt: skip
    done = subprocess.run(cmd, env={**clean, **env}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (weights,) = out.glob("pipeline/nodes/pretrain/a_softmax/seed0/*/model.pt")
    return torch.load(weights, map_location="cpu")


def same_bits(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_pinned_runs_match_bit_for_bit_across_dispatch_and_threads(tmp_path: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 cores: one worker then has 2 threads, two workers 1 each")
    here = pretrained(tmp_path / "a", "avx2", workers=1, env={})
    there = pretrained(tmp_path / "b", "avx2", workers=2, env=OTHER_CPU)
    assert same_bits(here, there)
    # the control: unpinned, the same two set-ups part in their low bits
    here = pretrained(tmp_path / "c", "null", workers=1, env={})
    there = pretrained(tmp_path / "d", "null", workers=2, env=OTHER_CPU)
    assert not same_bits(here, there)
