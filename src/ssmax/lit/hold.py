"""HoldAtStep: training waits at one step until told to go on. A hook for tests (and for a
person who wants to kill, preempt or signal a run at a known point): set it through
trainer.callbacks, e.g.

    trainer.callbacks='[{_target_: ssmax.lit.hold.HoldAtStep, step: 12, release: /tmp/go}]'

A test that kills a run mid-training, preempts a SLURM job, or starts a second run beside a
first then acts while training is held at a known step, whatever the machine's speed: it waits
for <run_dir>/held_at_step<N> (held_marker), acts, then releases (or the signal it sent
releases). Several holds are several callbacks. trainer.callbacks is not part of a node's
fingerprint: a re-invocation without the hold resumes the same node.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import lightning as L

from ssmax.host.ranks import global_rank
from ssmax.lit.resume import active_deferral


def held_marker(run_dir: str | Path, step: int) -> Path:
    """The file a hold at `step` writes in the run folder when it begins."""
    return Path(run_dir) / f"held_at_step{step}"


class HoldAtStep(L.Callback):
    """After optimizer step `step`, wait until the file `release` exists or a requeueing job's
    signal is pending (ssmax.lit.resume.DeferredSignal: served at the next step boundary), at
    most `timeout_s`, then train on. Holds once per run folder: a resumed run that passes the
    step again (its held_marker exists) does not wait."""

    def __init__(self, step: int, release: str | None = None, timeout_s: float = 900.0) -> None:
        self.step, self.timeout_s = step, timeout_s
        self.release = Path(release) if release else None
        self._done = False

    def on_train_batch_end(self, trainer: L.Trainer, *_: object) -> None:
        if self._done or trainer.global_step != self.step:
            return
        self._done = True  # the next micro-batches see the same global_step: hold once
        marker = held_marker(trainer.default_root_dir, self.step)
        if marker.exists():
            return
        if global_rank() == 0:
            marker.write_text(f"{self.step}\n")
        self._wait()

    def _wait(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not self._released():
            if time.monotonic() > deadline:
                print(f"HoldAtStep: not released after {self.timeout_s:.0f} s at step "
                      f"{self.step}; training on", file=sys.stderr, flush=True)  # fmt: skip
                return
            time.sleep(0.05)  # a signal's handler runs here, in the main thread

    def on_bundle_step(self, folder: Path, step: int) -> None:
        """The same hold in a bundle of seeds (ssmax.pipeline.bundle.train), its marker in the
        bundle's folder."""
        if self._done or step != self.step:
            return
        self._done = True
        marker = held_marker(folder, self.step)
        if marker.exists():
            return
        marker.write_text(f"{self.step}\n")
        self._wait()

    def _released(self) -> bool:
        if self.release is not None and self.release.exists():
            return True
        deferred = active_deferral()
        return deferred is not None and deferred.pending
