"""The Lightning datamodule of SFT over the examples of ssmax.data.sft_batches (pretraining's:
ssmax.data.lm_module, which imports none of this)."""

from __future__ import annotations

from functools import partial

from omegaconf import DictConfig
from torch.utils.data import DataLoader

from ssmax.data.lm_module import TokenizedDataModule
from ssmax.data.packing import train_sampler
from ssmax.data.sft_batches import WIDTH_MULTIPLE, SFTDataset, build_sft_dataset, trim_padding


class SFTDataModule(TokenizedDataModule):
    """Batches {"input_ids", "labels"} [B, T] of SQuAD-2.0-format examples, T trimmed to a
    multiple of ``width_multiple`` (WIDTH_MULTIPLE for a compiled loss; 1 trims exactly)."""

    def __init__(
        self, data_cfg: DictConfig, batch_size: int, seed: int = 0, width_multiple: int = 1
    ) -> None:
        super().__init__(data_cfg, batch_size, seed)
        self._sets: dict[str, SFTDataset] = {}
        self.width_multiple = width_multiple

    def prepare_data(self) -> None:
        self.tokenizer  # noqa: B018 - trains/caches the tokenizer once, on rank 0

    def dataset(self, split: str) -> SFTDataset:
        if split not in self._sets:
            self._sets[split] = build_sft_dataset(self.data_cfg, self.tokenizer, split)
        return self._sets[split]

    def _loader(self, split: str) -> DataLoader:
        ds = self.dataset(split)
        sampler = None
        if split == "train":
            done = self.start_batches + self.batches_done
            sampler = train_sampler(len(ds), self.seed, self.batch_size, done, False, *self.ranks(),
                                    self.trainer.current_epoch if self.trainer else 0)  # fmt: skip
        return DataLoader(
            ds,
            batch_size=self.batch_size,
            sampler=sampler,
            collate_fn=partial(trim_padding, multiple=self.width_multiple),
            num_workers=int(self.data_cfg.num_workers),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("validation")


def sft_datamodule(cfg: DictConfig, batch_size: int, compiled: bool) -> SFTDataModule:
    """SFT's datamodule for ssmax.lit.trainer.train: a compiled loss gets widths in multiples of
    WIDTH_MULTIPLE (a few shapes, a few graphs), an eager one exact widths."""
    return SFTDataModule(cfg.data, batch_size=batch_size, seed=cfg.seed,
                         width_multiple=WIDTH_MULTIPLE if compiled else 1)  # fmt: skip
