"""What the pretraining and SFT datamodules share: config, lazy tokenizer, resume position."""

from __future__ import annotations

from typing import Any

import lightning as L
from omegaconf import DictConfig

from ssmax.data.tokenizer import Tokenizer, load_tokenizer


class TokenizedDataModule(L.LightningDataModule):
    def __init__(self, data_cfg: DictConfig, batch_size: int, seed: int = 0) -> None:
        super().__init__()
        self.data_cfg, self.batch_size, self.seed = data_cfg, batch_size, seed
        self._tokenizer: Tokenizer | None = None
        self.batches_done = 0  # set on resume: training batches already seen
        self.start_batches = 0  # batches of this rank before this run's first ((f): (a)'s)
        self.start_state: dict[str, Any] = {}

    def resume_at(self, batches_done: int) -> None:
        """Called from the checkpoint, before the training dataloader is built."""
        self.batches_done = batches_done

    def start_from(self, state: dict[str, Any]) -> None:
        """Begin the data where another run's stood: its data_state() at some step (for (f),
        (a)'s at the switch point), so that this run trains on what that one would have next."""
        self.start_state = dict(state)
        self.start_batches = int(state["batches_done"])

    def ranks(self) -> tuple[int, int]:
        """(global rank, number of ranks) of the attached trainer; (0, 1) without one."""
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.data_cfg)
        return self._tokenizer
