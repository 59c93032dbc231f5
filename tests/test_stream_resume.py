"""SIGKILL in the middle of a streaming pretraining (local SlimPajama-format files, packed on the
fly by 2 DataLoader workers), re-invoke: it goes on from the stream position saved in its
checkpoint and ends with the weights of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from ssmax.lit.hold import held_marker
from tests.ddp_helpers import ROOT, RUN, slimpajama_files, streaming, train_command

pytestmark = pytest.mark.slow


def test_killed_streaming_run_resumes_to_identical_weights(
    tmp_path: Path, shared_cache: Path
) -> None:
    (tmp_path / "files").mkdir()
    files = slimpajama_files(tmp_path / "files")
    settings = [*streaming(files), "data.num_workers=2", "trainer.pretrain.max_steps=24",
                "trainer.checkpoint_every_n_steps=4", "trainer.deterministic=true"]  # fmt: skip
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    command = lambda out, *extra: train_command(out, shared_cache, 1, 4, *settings, *extra)  # noqa: E731
    subprocess.run(command(straight), cwd=ROOT, check=True, capture_output=True)

    # Training waits after step 6 (a checkpoint of step 4 on disk) until it is killed, however
    # fast the machine is; the re-invocation runs without the hold.
    hold = "trainer.callbacks=[{_target_: ssmax.lit.hold.HoldAtStep, step: 6}]"
    proc = subprocess.Popen(command(killed, hold), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    checkpoint = killed / RUN / "checkpoints" / "last.ckpt"
    held = held_marker(killed / RUN, 6)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None and not held.exists():
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert not (killed / RUN / "model.pt").exists()
    saved = torch.load(checkpoint, weights_only=False)
    assert saved["global_step"] == 4  # killed in the middle, held after step 6

    out = subprocess.run(command(killed), cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    want = torch.load(straight / RUN / "model.pt", weights_only=True)
    got = torch.load(killed / RUN / "model.pt", weights_only=True)
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want)
    assert len(saved["LMDataModule"]["stream_positions"]) == 2  # one per worker
