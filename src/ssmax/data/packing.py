"""Packing token streams into fixed-length LM examples (inputs + next-token labels).

Documents are joined as doc EOS doc EOS ...; each example is a chunk of T+1 tokens, split into
input_ids = chunk[:-1] and labels = chunk[1:], so labels[t] is the target for position t.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from ssmax.data.tokenizer import Tokenizer


def pack(docs: Iterable[list[int]], eos_id: int, seq_len: int) -> torch.Tensor:
    """All documents (each followed by EOS) cut into rows of seq_len + 1; the tail is dropped."""
    flat = np.fromiter(
        (t for doc in docs for t in (*doc, eos_id)), dtype=np.int64
    )  # fromiter keeps memory at 8 bytes per token
    rows = len(flat) // (seq_len + 1)
    return torch.from_numpy(flat[: rows * (seq_len + 1)].reshape(rows, seq_len + 1))


def split_chunk(chunk: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"input_ids": chunk[..., :-1], "labels": chunk[..., 1:]}


class PackedDataset(Dataset):
    """Map-style view over packed rows [N, T+1]. An index k >= N (the training sampler's
    epoch * N + i) reads row k % N; ``transform(row, k)`` (e.g. planted facts) sees k, so a
    row can differ from epoch to epoch and still be the same on every re-run."""

    def __init__(
        self,
        rows: torch.Tensor,
        transform: Callable[[torch.Tensor, int], dict[str, torch.Tensor]] | None = None,
    ) -> None:
        self.rows, self.transform = rows, transform

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, k: int) -> dict[str, torch.Tensor]:
        row = self.rows[k % len(self.rows)]
        return split_chunk(row) if self.transform is None else self.transform(row, k)


class EpochShuffleSampler(Sampler[int]):
    """A permutation that depends only on (seed, epoch): reproducible and resumable.

    Yields epoch * n + i for row i (datasets read row k % n), so a dataset can tell the passes
    apart. Under DDP (world > 1) each rank takes every world-th index of the permutation, so
    the ranks are disjoint and their micro-batch j together is the one-process micro-batch j at
    the same global batch. drop_last: the ranks take n // world each (the rest waits for the
    next epoch's order); else the permutation wraps around to give every rank ceil(n / world).
    Lightning calls set_epoch at each epoch start (plus epoch_offset: a run that starts in
    another run's data, see train_sampler); without it the epoch counts up per pass.
    """

    def __init__(
        self,
        n: int,
        seed: int,
        skip: int = 0,
        rank: int = 0,
        world: int = 1,
        drop_last: bool = True,
        epoch_offset: int = 0,
    ) -> None:
        self.n, self.seed, self.epoch = n, seed, epoch_offset
        self.skip = skip  # samples of the first pass already trained on (resume mid-epoch)
        self.rank, self.world, self.drop_last = rank, world, drop_last
        self.epoch_offset = epoch_offset
        self._explicit = False

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self._explicit = epoch + self.epoch_offset, True

    def __len__(self) -> int:
        return self.n // self.world if self.drop_last else -(-self.n // self.world)

    def __iter__(self) -> Iterator[int]:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.randperm(self.n, generator=gen)
        if self.world > 1:
            if not self.drop_last:  # wrap around so that every rank has the same count
                order = torch.cat([order, order[: len(self) * self.world - self.n]])
            order = order[self.rank : len(self) * self.world : self.world]
        order = order[self.skip :] + self.epoch * self.n
        self.skip = 0
        if not self._explicit:
            self.epoch += 1
        self._explicit = False
        # in chunks: a list of ~10^8 Python ints (paper-scale shards) would take gigabytes
        return (i for chunk in order.split(1 << 16) for i in chunk.tolist())


def train_sampler(
    n: int,
    seed: int,
    batch_size: int,
    batches_done: int,
    drop_last: bool,
    rank: int = 0,
    world: int = 1,
    epoch: int = 0,
) -> EpochShuffleSampler:
    """The training sampler of one rank, positioned after ``batches_done`` batches of this rank
    (counted from the start of the data, which may lie in another run: (f) starts where (a)
    stood), so that a resumed run sees the same data order. ``epoch``: Lightning's epoch
    counter when the loader is built (it restores it on resume)."""
    per_rank = n // world if drop_last else -(-n // world)
    per_epoch = max(per_rank // batch_size if drop_last else -(-per_rank // batch_size), 1)
    data_epoch, done = divmod(batches_done, per_epoch)
    return EpochShuffleSampler(
        n, seed, done * batch_size, rank, world, drop_last, epoch_offset=data_epoch - epoch
    )


def chunk_stream(token_docs: Iterable[list[int]], eos_id: int, size: int) -> Iterator[torch.Tensor]:
    """Pack documents on the fly: yields LongTensor[size] chunks of doc EOS doc EOS ..."""
    buf: list[int] = []
    for doc in token_docs:
        buf.extend(doc)
        buf.append(eos_id)
        while len(buf) >= size:
            yield torch.tensor(buf[:size], dtype=torch.long)
            del buf[:size]


def encode_stream(
    texts: Iterable[str], tokenizer: Tokenizer, batch: int = 64
) -> Iterator[list[int]]:
    """Tokenize a text stream in small batches (batching lets the tokenizers use threads)."""
    pending: list[str] = []
    for text in texts:
        pending.append(text)
        if len(pending) == batch:
            yield from tokenizer.encode_batch(pending)
            pending = []
    if pending:
        yield from tokenizer.encode_batch(pending)
