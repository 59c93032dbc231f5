"""Packing token streams into fixed-length LM examples (inputs + next-token labels).

Documents are joined as doc EOS doc EOS ...; each example is a chunk of T+1 tokens, split into
input_ids = chunk[:-1] and labels = chunk[1:], so labels[t] is the target for position t.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, Sampler, get_worker_info

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
    apart. Lightning calls set_epoch at each epoch start; without it the epoch counts up per
    pass.
    """

    def __init__(self, n: int, seed: int, skip: int = 0) -> None:
        self.n, self.seed, self.epoch = n, seed, 0
        self.skip = skip  # samples of the first pass already trained on (resume mid-epoch)
        self._explicit = False

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self._explicit = epoch, True

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = (torch.randperm(self.n, generator=gen) + self.epoch * self.n).tolist()[self.skip :]
        self.skip = 0
        if not self._explicit:
            self.epoch += 1
        self._explicit = False
        return iter(order)


def train_sampler(
    n: int, seed: int, batch_size: int, batches_done: int, drop_last: bool
) -> EpochShuffleSampler:
    """The training sampler, positioned after ``batches_done`` batches (counted from the start
    of training), so that a run resumed from a checkpoint sees the same data order."""
    per_epoch = n // batch_size if drop_last else -(-n // batch_size)
    return EpochShuffleSampler(n, seed, skip=(batches_done % max(per_epoch, 1)) * batch_size)


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


class PackedStream(IterableDataset):
    """Streaming LM examples; DataLoader workers take every n-th document.

    make_texts(epoch) returns the document texts for that epoch (shuffled by the caller).
    """

    def __init__(
        self,
        make_texts: Callable[[int], Iterable[str]],
        tokenizer: Tokenizer,
        seq_len: int,
        max_sequences: int | None = None,
    ) -> None:
        self.make_texts, self.tokenizer = make_texts, tokenizer
        self.seq_len, self.max_sequences = seq_len, max_sequences
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        texts = (t for i, t in enumerate(self.make_texts(self.epoch)) if i % nw == wid)
        limit = None if self.max_sequences is None else -(-self.max_sequences // nw)
        self.epoch += 1  # next pass reshuffles (only visible with num_workers=0)
        chunks = chunk_stream(
            encode_stream(texts, self.tokenizer), self.tokenizer.eos_id, self.seq_len + 1
        )
        for n, chunk in enumerate(chunks):
            if limit is not None and n >= limit:
                return
            yield split_chunk(chunk)
