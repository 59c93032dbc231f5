"""Each seed's data in a seed bundle (ssmax.lit.bundle.run): its datamodule as its solo run builds
it (the rows or examples that every seed shares read once), its batches pass by pass (where a
pass ends, Lightning steps with the micro-batches it has), and the seeds' batches stacked.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from ssmax.data.lm import fact_transform
from ssmax.data.lm_module import LMDataModule, TokenizedDataModule
from ssmax.data.packing import PackedDataset
from ssmax.data.sft_module import SFTDataModule
from ssmax.model.loss import IGNORE


def seed_datamodules(cfg: DictConfig, seeds: Sequence[int], batch_size: int) -> list[LMDataModule]:
    """Each seed's pretraining datamodule, as lm_datamodule builds it for a solo run with that
    seed. On the embedded corpus the packed rows (the same for every seed) are read once and
    shared; each seed keeps its own planted facts and sampler."""
    modules = [LMDataModule(cfg.data, batch_size=batch_size, seed=s) for s in seeds]
    first = modules[0]
    first.prepare_data()
    first.setup("fit")
    shared = first.dataset("train")
    for module in modules[1:]:
        module._tokenizer = first.tokenizer
        if isinstance(shared, PackedDataset):
            plant = fact_transform(cfg.data, first.tokenizer, module.seed)
            module._sets["train"] = PackedDataset(shared.rows, plant)
    return modules


def sft_datamodules(cfg: DictConfig, seeds: Sequence[int], batch_size: int) -> list[SFTDataModule]:
    """Each seed's SFT datamodule, as sft_datamodule builds it for an eager solo run (exact
    widths); the examples (the same for every seed) read once and shared, each seed its own
    sampler."""
    modules = [SFTDataModule(cfg.data, batch_size=batch_size, seed=s) for s in seeds]
    first = modules[0]
    first.prepare_data()
    first.setup("fit")
    for module in modules[1:]:
        module._tokenizer = first.tokenizer
        module._sets = first._sets
    return modules


def passes(
    module: TokenizedDataModule, workers: int = 0
) -> Iterator[tuple[dict[str, torch.Tensor], bool]]:
    """A seed's training batches without end, each with whether it is the last of its pass
    over the loader (Lightning's last batch of an epoch: it steps there with the micro-batches
    it has). A new pass when one ends (the sampler counts the epochs itself, as Lightning's
    set_epoch would set them). One loader, iterated again: a new loader's sampler would start
    at epoch 0 again. workers > 0: the batches made in that many loader processes of the
    seed's own (the same batches)."""
    loader = module.train_dataloader()
    if workers > 0:
        loader = with_workers(loader, workers)
    while True:
        rows = iter(loader)
        ahead = next(rows, None)
        if ahead is None:
            raise RuntimeError(f"seed {module.seed}: a pass over its training data is empty")
        while ahead is not None:
            batch, ahead = ahead, next(rows, None)
            yield batch, ahead is None


def batches(module: TokenizedDataModule, workers: int = 0) -> Iterator[dict[str, torch.Tensor]]:
    """A seed's training batches without end (passes, without the ends)."""
    return (batch for batch, _ in passes(module, workers))


def stacked(seed_batches: list[dict[str, torch.Tensor]], pad_id: int) -> tuple[torch.Tensor, ...]:
    """(input_ids, labels) [K, B, T] of each seed's batch [B, T_k], right-padded to the widest
    T_k (SFT trims a batch to its longest example): EOS, as the examples are padded, with
    labels ignored; attention is causal, so no loss term changes."""
    width = max(b["input_ids"].shape[-1] for b in seed_batches)

    def pad(t: torch.Tensor, value: int) -> torch.Tensor:
        return t if t.shape[-1] == width else F.pad(t, (0, width - t.shape[-1]), value=value)

    ids = torch.stack([pad(b["input_ids"], pad_id) for b in seed_batches])
    return ids, torch.stack([pad(b["labels"], IGNORE) for b in seed_batches])


def with_workers(loader: DataLoader, workers: int) -> DataLoader:
    """The same loader (dataset, sampler, batches) in `workers` forked processes, or in this
    one (0). Forked, whatever the default: a pipeline worker's default is its forkserver's,
    which would pickle each seed's dataset to start a loader."""
    forked = {"multiprocessing_context": "fork", "persistent_workers": True} if workers else {}
    return DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=loader.sampler,
                      drop_last=loader.drop_last, collate_fn=loader.collate_fn,
                      num_workers=workers, **forked)  # fmt: skip
