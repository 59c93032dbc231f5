"""The same bits whatever kernels the CPU would pick (``trainer.cpu_isa``).

A CPU run's low bits depend on the kernels it runs: PyTorch's own kernels, MKL's GEMMs and
oneDNN pick their code by the CPU's instruction set (AVX-512, AVX2, ...), and ATen's parallel
reductions split by the thread count. A low bit flipped early moves a whole training run, so a
seed trained on other kernels is, for the claims, almost another seed. ``cpu_isa="avx2"`` pins
all three to their AVX2 code (every x86 CPU since 2013 has it) and runs each node on one torch
thread: the same packages give the same weights however the process was started
(tests/test_cpu_isa.py), for some more CPU time. The variables are read when a process first
computes, so they are set before that, in the process that runs the node (and the local
executor's fork server).

The pin covers kernel dispatch and threads, not the packages: other versions of them (torch,
numpy, ...) give other bits on the same CPU, and whether another CPU with the same packages
gives these bits is not shown. Measured: docs/tiny-scale.md, "The same bits on another CPU"."""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

PINS: dict[str, dict[str, str]] = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}


def on_cpu(accelerator: str) -> bool:
    """Whether a node with this trainer.accelerator computes on the CPU."""
    import torch

    return accelerator == "cpu" or not torch.cuda.is_available()


def pin_environment(isa: str | None) -> bool:
    """Set the variables that pin the kernels to ``isa`` (None: leave the CPU's own choice);
    True when pinned. Takes effect only in a process that has not computed yet."""
    if isa is None:
        return False
    os.environ.update(PINS[isa])
    return True


def check_pinned(isa: str) -> bool:
    """After pin_environment: did PyTorch take the pin? (No where the CPU lacks the set, or the
    process computed before.) A one-line warning when not: the run is fine, its bits are this
    machine's."""
    import torch

    got = torch.backends.cpu.get_cpu_capability()
    if got != isa.upper():
        log.warning("trainer.cpu_isa=%s: torch runs %s kernels here; this run's low bits are "
                    "this machine's", isa, got)  # fmt: skip
        return False
    return True
