"""Every rank reads different data, exactly once, and a resumed DDP run goes on where it stopped.

Real runs: the one-process run in this process (ssmax.lit.trainer.train, what `python -m
ssmax.train` runs), and `python -m ssmax.train` under torchrun as 2 processes (Lightning DDP,
gloo, CPU), each recording what it trained on. Per optimizer step the two ranks' rows are
disjoint and together are the rows of the one-process run at the same global batch (4 rows):
- embedded (map-style, the sampler): against 1 process x batch 4;
- streaming SlimPajama files (packed on the fly): against 1 process with 2 DataLoader workers x
  batch 2 x 2 accumulation. The stream has one shard per (rank, worker), each packing its own
  documents, so 2 ranks x 1 worker equal 1 rank x 2 workers. Against 1 rank x 1 worker the
  documents are the same but are cut into rows at other places (each shard packs its own).
The streaming 2-process run stops at step 2 and is re-invoked to step 4: it resumes from its
checkpoint (the stream positions gathered from both ranks), and its steps 2-3 must still be
those of the one-process run. (The embedded corpus resumes by the sampler's skip, per rank:
test_sampler_ranks.py, and a real kill in test_resume.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ssmax.config.compose import compose
from ssmax.data.lm_module import LMDataModule
from tests.ddp_helpers import (
    run,
    slimpajama_files,
    step_rows,
    streaming,
    train_command,
    train_here,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return slimpajama_files(tmp_path_factory.mktemp("slimpajama"))


def check_ranks_partition(one: Path, two: Path) -> None:
    reference, rank0, rank1 = step_rows(one), step_rows(two, 0), step_rows(two, 1)
    assert sorted(reference) == sorted(rank0) == sorted(rank1) == [0, 1, 2, 3]
    for step, want in reference.items():
        assert len(rank0[step]) == len(rank1[step]) == 2
        assert not set(rank0[step]) & set(rank1[step]), f"step {step}: ranks share rows"
        assert sorted(rank0[step] + rank1[step]) == want, f"step {step}: not the 1-process rows"


@pytest.mark.parametrize("source", ["embedded", "streaming"])
def test_two_ranks_split_the_one_process_batches(
    tmp_path: Path, shared_cache: Path, files: dict[str, str], source: str
) -> None:
    data = streaming(files) if source == "streaming" else []
    one_process = ["data.num_workers=2", "trainer.pretrain.batch_size=2"] if data else []
    train_here(tmp_path / "one", shared_cache, 4, *data, *one_process)
    two = tmp_path / "two"
    if source == "streaming":  # stops at step 2, is resumed to step 4
        stop = ["trainer.pretrain.max_steps=2", "trainer.checkpoint_every_n_steps=2"]
        run(train_command(two, shared_cache, 2, 2, *data, *stop))
    run(train_command(two, shared_cache, 2, 2, *data, "trainer.checkpoint_every_n_steps=2"))
    check_ranks_partition(tmp_path / "one", two)


def test_a_training_leaves_no_process_group_behind(tmp_path: Path, shared_cache: Path) -> None:
    """A rank whose gloo group outlives the interpreter aborts at exit now and then ("terminate
    called without an active exception": test_ddp_data's two-rank run, once in ~10 suites;
    pytorch#190489), and Lightning destroys NCCL's group only: training destroys the group it
    trained in (here one of one process, made before the run as torchrun's ranks make theirs)."""
    store = f"file://{tmp_path / 'store'}"
    torch.distributed.init_process_group("gloo", init_method=store, rank=0, world_size=1)
    try:
        train_here(tmp_path / "one", shared_cache, 4, "trainer.pretrain.max_steps=2")
    finally:
        left = torch.distributed.is_initialized()
        if left:
            torch.distributed.destroy_process_group()
    assert not left


def test_stream_workers_read_each_document_once(
    tmp_path: Path, shared_cache: Path, files: dict[str, str]
) -> None:
    """2 DataLoader workers on one file: between them every validation token, once (datasets
    would split the file by worker a second time, leaving one worker nothing)."""
    cfg = compose("preset=smoke", f"paths.cache_dir={shared_cache}", *streaming(files))
    cfg.data.max_eval_sequences = None
    dm = LMDataModule(cfg.data, batch_size=4, seed=0)
    expected = sum(len(ids) + 1 for ids in dm.tokenizer.encode_batch(
        [line for line in _texts(files["validation"])]))  # fmt: skip
    size = cfg.data.seq_len + 1
    for workers in (0, 2):
        cfg.data.num_workers = workers
        dm = LMDataModule(cfg.data, batch_size=4, seed=0)
        got = sum(b["input_ids"].shape[0] for b in dm.val_dataloader()) * size
        assert expected - max(workers, 1) * size < got <= expected, (workers, got, expected)


def _texts(path: str) -> list[str]:
    import json

    return [json.loads(line)["text"] for line in Path(path).read_text().splitlines()]
