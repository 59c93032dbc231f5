"""The training sampler under DDP and on resume, without processes: what each rank takes."""

from __future__ import annotations

import itertools

import pytest

from ssmax.data.packing import EpochShuffleSampler, train_sampler


@pytest.mark.parametrize("drop_last", [True, False])
def test_ranks_take_disjoint_slices_of_one_permutation(drop_last: bool) -> None:
    n, world = 51, 4
    alone = list(EpochShuffleSampler(n, seed=3))
    ranks = [list(EpochShuffleSampler(n, 3, rank=r, world=world, drop_last=drop_last))
             for r in range(world)]  # fmt: skip
    assert len({len(r) for r in ranks}) == 1  # same count on every rank: no DDP hang
    interleaved = [i for group in zip(*ranks, strict=True) for i in group]
    if drop_last:  # 12 each; the last 3 of this epoch's order wait for the next one
        assert interleaved == alone[:48]
    else:  # 13 each, wrapping around to the first indices
        assert interleaved == alone + alone[:1]


@pytest.mark.parametrize(("world", "drop_last"), [(1, True), (2, True), (3, False)])
def test_resumed_sampler_continues_the_sequence(world: int, drop_last: bool) -> None:
    """Positioned after k batches (possibly in a later epoch), a rank's sampler yields the
    batches the uninterrupted one yields from there, epoch after epoch (Lightning calls
    set_epoch with its restored epoch counter)."""
    n, size, rank = 23, 3, world - 1
    per_rank = len(EpochShuffleSampler(n, 5, rank=rank, world=world, drop_last=drop_last))
    per_epoch = per_rank // size if drop_last else -(-per_rank // size)

    def batches(done: int, epochs: int) -> list[list[int]]:
        lightning_epoch = done // per_epoch
        sampler = train_sampler(n, 5, size, done, drop_last, rank, world, lightning_epoch)
        out: list[list[int]] = []
        for epoch in range(lightning_epoch, lightning_epoch + epochs):
            sampler.set_epoch(epoch)
            order = list(sampler)
            chunks = [order[i : i + size] for i in range(0, len(order), size)]
            out += [c for c in chunks if len(c) == size or not drop_last]
        return out

    straight = batches(0, 12)
    for done in (1, 4, 9, 17):
        resumed = batches(done, 3)
        assert len(straight) > done + len(resumed) and resumed == straight[done:][: len(resumed)]


def test_start_in_another_runs_data() -> None:
    """(f) starts at (a)'s batch k with Lightning's epoch at 0: the epoch offset carries it."""
    n, batch = 20, 4  # 5 batches per epoch
    a = train_sampler(n, 0, batch, 0, True)
    a_order = []
    for epoch in range(3):
        a.set_epoch(epoch)
        a_order += list(a)
    f = train_sampler(n, 0, batch, 7, True, epoch=0)  # (a) took 7 batches: epoch 1, batch 2
    f.set_epoch(0)
    first = list(f)
    f.set_epoch(1)
    assert first + list(f) == a_order[7 * batch : 15 * batch]
    assert list(itertools.islice(first, 4)) == a_order[28:32]
