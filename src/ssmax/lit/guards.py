"""Training faults that stop or redirect a run with one line instead of a page.

- check_finite: a NaN or infinite training loss stops the run at that step (TrainingDiverged)
  before the step changes the weights, is logged or checkpointed: the last good checkpoint
  stays, and no done-marker is written.
- resume_from: a last.ckpt that does not load is set aside (renamed, said in one line) and the
  run starts from scratch instead of failing on every resume.
"""

from __future__ import annotations

import sys
from pathlib import Path

import lightning as L
import torch

from ssmax.files.atomic import set_aside

CORRUPT = "corrupt"  # last.ckpt -> last.ckpt.corrupt-<unix time>


class TrainingDiverged(RuntimeError):
    """The training loss is not finite; the message is one line naming the step."""


def check_finite(losses: list[torch.Tensor], trainer: L.Trainer) -> None:
    """Raise TrainingDiverged when a loss of this optimizer step is NaN or infinite. Called
    before the step updates the weights and before its metrics are logged (LitLM), so the
    weights, the MLflow history and the last checkpoint hold only good steps."""
    if not losses:
        return
    loss = torch.stack([x.detach().float() for x in losses])
    finite = torch.isfinite(loss)
    # Every rank decides together (DDP): one that stopped alone would leave the others waiting.
    if not trainer.strategy.reduce_boolean_decision(not bool(finite.all()), all=False):
        return
    value = loss[~finite][0].item() if not bool(finite.all()) else "not finite on another rank"
    callback = trainer.checkpoint_callback
    last = Path(callback.dirpath) / "last.ckpt" if callback and callback.dirpath else None
    kept = (
        f"the last good checkpoint stays ({last})"
        if last is not None and last.exists()
        else "no checkpoint was written before it"
    )
    raise TrainingDiverged(
        f"training loss is {value} at step {trainer.global_step + 1}; {kept}, "
        "no result is written; lower the learning rate (trainer.<objective>.lr) or lengthen "
        "the warmup, then run again (it resumes from that checkpoint)"
    )


def resume_from(checkpoint: Path, rank0: bool = True) -> Path | None:
    """checkpoint (last.ckpt) if it loads, else None (start from scratch). One that does not
    load is renamed to <name>.corrupt-<time> by rank 0 and said in one line on stderr; the
    other ranks reach the same decision (the file is gone, or it does not load for them)."""
    if not checkpoint.exists():
        return None
    try:
        torch.load(checkpoint, map_location="cpu", weights_only=False, mmap=True)
    except Exception as err:  # zip, pickle and I/O errors alike: it does not load
        if rank0:
            aside = set_aside(checkpoint, CORRUPT)
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:100]
            print(
                f"warning: {checkpoint} does not load ({reason}); set aside as {aside.name}, "
                "training starts from scratch",
                file=sys.stderr,
                flush=True,
            )
        return None
    return checkpoint
