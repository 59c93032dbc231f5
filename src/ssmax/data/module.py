"""What the pretraining and SFT datamodules share: config, lazy tokenizer, resume position."""

from __future__ import annotations

import lightning as L
from omegaconf import DictConfig

from ssmax.data.tokenizer import Tokenizer, load_tokenizer


class TokenizedDataModule(L.LightningDataModule):
    def __init__(self, data_cfg: DictConfig, batch_size: int, seed: int = 0) -> None:
        super().__init__()
        self.data_cfg, self.batch_size, self.seed = data_cfg, batch_size, seed
        self._tokenizer: Tokenizer | None = None
        self.batches_done = 0  # set on resume: training batches already seen

    def resume_at(self, batches_done: int) -> None:
        """Called from the checkpoint, before the training dataloader is built."""
        self.batches_done = batches_done

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.data_cfg)
        return self._tokenizer
