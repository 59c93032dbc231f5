"""(f) continues (a)'s data: its first optimizer step trains on the batches (a) took at step
switch_step + 1, for the embedded corpus (the sampler) and for a stream packed on the fly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ssmax.pipeline.run import execute_node, plan
from tests.batch_recorder import load_batches
from tests.ddp_helpers import RECORD, slimpajama_files, streaming

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("source", ["embedded", "streaming"])
def test_switch_f_starts_where_a_stood(tmp_path: Path, shared_cache: Path, source: str) -> None:
    data = streaming(slimpajama_files(tmp_path)) if source == "streaming" else []
    overrides = [
        "preset=smoke", "pipeline.variants=[f_switch_during_pretrain]", "tracking.enabled=false",
        "trainer.pretrain.max_steps=8", "trainer.pretrain.batch_size=2",  # 2 micro-batches a step
        f"paths.output_dir={tmp_path / 'out'}", f"paths.cache_dir={shared_cache}", RECORD, *data,
    ]  # fmt: skip
    _, jobs = plan(overrides)
    pretrain = next(j for j in jobs if j.name == "pretrain/a_softmax/seed0")
    switch = next(j for j in jobs if j.name == "switch/f_switch_during_pretrain/seed0")
    a = execute_node(pretrain)["outputs"]
    execute_node(switch)
    step = a["switch_step"]  # 7 of 8: (f) trains the 8th
    a_batches, f_batches = load_batches(Path(pretrain.dir)), load_batches(Path(switch.dir))
    assert sorted(f_batches) == [0]
    assert len(f_batches[0]) == len(a_batches[step]) == 2
    for got, want in zip(f_batches[0], a_batches[step], strict=True):
        assert torch.equal(got, want)
    assert not torch.equal(f_batches[0][0], a_batches[0][0])  # not (a)'s first batch again
