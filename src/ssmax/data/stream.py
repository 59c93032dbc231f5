"""Streaming LM examples: documents packed on the fly, each read by exactly one (rank,
DataLoader worker), with a position that a checkpoint can hold.

Shards. A run has S = ranks x workers stream shards; shard s = rank x workers + worker.
``make_docs(epoch, s, S)`` gives shard s its documents (ssmax.data.lm: datasets'
``split_dataset_by_node`` with rank=s, world_size=S, read through ``IterableDataset.iter``,
which skips datasets' own split by DataLoader worker: that would split a second time). Each
shard packs its own documents, so the rows depend on S: 2 ranks x 1 worker train on the rows of
1 rank x 2 workers at the same global batch; against 1 rank x 1 worker the documents are the
same but cut into rows at other places.

Position. A training stream runs through epochs (a new seeded shuffle each) without end. After
each row a shard stands at (epoch, documents of that epoch consumed, tokens of the next one
used); rows carry it ("shard", "position"), the datamodule keeps the last one trained on per
shard, and checkpoints save them. Resuming skips the documents before that point without
tokenizing them (they are still read: pre-tokenized shards avoid even that).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator

import torch
from torch.utils.data import IterableDataset, get_worker_info

from ssmax.data.packing import encode_stream, split_chunk
from ssmax.data.tokenizer import Tokenizer

Position = tuple[int, int, int]  # (epoch, documents consumed in it, tokens of the next used)
START: Position = (0, 0, 0)


def stream_shards(world: int, num_workers: int) -> int:
    """How many shards a run's stream has: one per (rank, DataLoader worker)."""
    return world * max(num_workers, 1)


class PackedStream(IterableDataset):
    """Rows {"input_ids", "labels", "shard", "position"} of one split.

    make_docs(epoch, shard, shards) returns the document texts of one shard for that epoch.
    cycle: run through epochs without end (training); else one pass of epoch 0, at most
    max_sequences rows (validation).
    """

    def __init__(
        self,
        make_docs: Callable[[int, int, int], Iterable[str]],
        tokenizer: Tokenizer,
        seq_len: int,
        max_sequences: int | None = None,
        cycle: bool = False,
    ) -> None:
        self.make_docs, self.tokenizer = make_docs, tokenizer
        self.seq_len, self.max_sequences, self.cycle = seq_len, max_sequences, cycle
        self.rank, self.world, self.rotate = 0, 1, 0
        self.start: list[Position] | None = None  # per shard; None: every shard from START

    def place(
        self,
        rank: int,
        world: int,
        num_workers: int,
        start: list[Position] | None = None,
        batches_taken: int = 0,
    ) -> None:
        """Before a DataLoader is built over the stream: this process's rank among ``world``,
        where each shard starts, and how many batches this rank has taken since the shards
        were at START. A DataLoader takes its batches from its workers in turn, always
        beginning with worker 0; a resumed one must begin with the shard whose turn was next."""
        shards = stream_shards(world, num_workers)
        if start is not None and len(start) != shards:
            raise ValueError(
                f"the data stream was saved with {len(start)} shards and this run has {shards} "
                "(ranks x data.num_workers): set trainer.devices, trainer.num_nodes and "
                "data.num_workers as they were, to continue the same stream"
            )
        self.rank, self.world, self.start = rank, world, start
        self.rotate = batches_taken % max(num_workers, 1)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        shard = self.rank * workers + (worker + self.rotate) % workers
        shards = self.world * workers
        start = tuple(self.start[shard]) if self.start else START
        limit = None if self.max_sequences is None else -(-self.max_sequences // workers)
        for row, position in itertools.islice(self.rows(shard, shards, start), limit):
            yield {**split_chunk(row), "shard": shard, "position": torch.tensor(position)}

    def rows(
        self, shard: int, shards: int, start: Position
    ) -> Iterator[tuple[torch.Tensor, Position]]:
        """LongTensor[T+1] rows of one shard (doc EOS doc EOS ...) with the position after each."""
        epoch, skip, offset = start
        size, eos = self.seq_len + 1, self.tokenizer.eos_id
        buf: list[int] = []
        pending: deque[list[int]] = deque()  # [epoch, doc, offset, tokens left] of docs in buf
        while True:
            texts = itertools.islice(self.make_docs(epoch, shard, shards), skip, None)
            doc = skip - 1
            for doc, ids in enumerate(encode_stream(texts, self.tokenizer), start=skip):  # noqa: B007
                tokens = [*ids, eos][offset:]
                pending.append([epoch, doc, offset, len(tokens)])
                buf.extend(tokens)
                offset = 0
                while len(buf) >= size:
                    row = torch.tensor(buf[:size], dtype=torch.long)
                    del buf[:size]
                    yield row, _consume(pending, size, (epoch, doc + 1, 0))
            if not self.cycle:
                return
            if doc < 0:  # a whole epoch without a document: it would loop for ever
                raise ValueError(
                    f"stream shard {shard} of {shards} got no documents: the split has fewer "
                    "documents (or files) than ranks x data.num_workers"
                )
            epoch, skip = epoch + 1, 0


def _consume(pending: deque[list[int]], n: int, after_all: Position) -> Position:
    """Drop n tokens from the front of the buffered documents; the position of the next one."""
    while n:
        seg = pending[0]
        take = min(n, seg[3])
        seg[2], seg[3], n = seg[2] + take, seg[3] - take, n - take
        if seg[3] == 0:
            pending.popleft()
    return tuple(pending[0][:3]) if pending else after_all
