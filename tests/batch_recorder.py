"""A Lightning callback for tests: what each rank trained on, step by step.

Given to a training run as `trainer.callbacks=[{_target_: tests.batch_recorder.RecordBatches}]`
(a real observer: the run itself is unchanged). At the end of fit each rank writes
``batches-rank<r>-from<step>.pt`` into ``out`` (default: the run folder): a list of
(optimizer step, input_ids [B, T]) per micro-batch, in order.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch


class RecordBatches(L.Callback):
    def __init__(self, out: str | None = None) -> None:
        self.out = out
        self.seen: list[tuple[int, torch.Tensor]] = []

    def on_train_batch_start(self, trainer: L.Trainer, lit: L.LightningModule, batch, idx) -> None:  # noqa: ANN001
        self.seen.append((trainer.global_step, batch["input_ids"].detach().cpu().clone()))

    def on_train_end(self, trainer: L.Trainer, lit: L.LightningModule) -> None:
        if not self.seen:
            return
        folder = Path(self.out or trainer.default_root_dir)
        folder.mkdir(parents=True, exist_ok=True)
        name = f"batches-rank{trainer.global_rank}-from{self.seen[0][0]}.pt"
        torch.save(self.seen, folder / name)


def load_batches(folder: Path, rank: int = 0) -> dict[int, list[torch.Tensor]]:
    """{optimizer step: [micro-batch input_ids, ...]} of one rank, over all its recordings
    (a resumed run adds the steps after its checkpoint)."""
    steps: dict[int, list[torch.Tensor]] = {}
    files = sorted(folder.glob(f"batches-rank{rank}-from*.pt"),
                   key=lambda p: int(p.stem.rsplit("from", 1)[1]))  # fmt: skip
    for path in files:
        resumed: dict[int, list[torch.Tensor]] = {}
        for step, ids in torch.load(path, weights_only=True):
            resumed.setdefault(step, []).append(ids)
        steps.update(resumed)  # a later recording replaces the steps it trained again
    return steps
