"""Launching real training runs for the data tests: `python -m ssmax.train` in one process, or
under torchrun with N processes (Lightning DDP over gloo on CPU), recording every batch."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import torch

from ssmax.config.compose import compose
from ssmax.train import train_config
from tests.batch_recorder import load_batches

ROOT = Path(__file__).resolve().parents[1]
RECORD = "trainer.callbacks=[{_target_:tests.batch_recorder.RecordBatches}]"
RUN = "runs/a_softmax-pretrain-seed0"


def slimpajama_files(folder: Path, docs: int = 300) -> dict[str, str]:
    """Local train/validation/test jsonl in SlimPajama's format, documents of varied length."""
    files = {}
    for split in ("train", "validation", "test"):
        path = folder / f"{split}.jsonl"
        with path.open("w") as f:
            for i in range(docs):
                words = " ".join(f"w{(i * 7 + j) % 50}" for j in range(20 + i % 30))
                text = f"{split} document {i}: {words}"
                f.write(json.dumps({"text": text, "meta": {"redpajama_set_name": "C4"}}) + "\n")
        files[split] = str(path)
    return files


def streaming(files: dict[str, str]) -> list[str]:
    mapping = ",".join(f"{k}:{v}" for k, v in files.items())
    # planted facts (on in the smoke preset) go into the embedded corpus only
    return ["data=slimpajama", "data.tokenizer=bpe", "data.vocab_size=512", "data.seq_len=64",
            "data.max_eval_sequences=4", f"data.slimpajama_files={{{mapping}}}",
            "data.facts.fraction=0"]  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_settings(out: Path, cache: Path, ranks: int, batch: int, *extra: str) -> list[str]:
    """A smoke-preset pretraining of global batch 4, split over ``ranks`` processes."""
    return [
        "preset=smoke", "tracking.enabled=false", "trainer.accelerator=cpu",
        "trainer.progress_bar=false", "trainer.pretrain.max_steps=4",
        "trainer.pretrain.global_batch=4", "trainer.sft.batch_size=2", "trainer.val_batches=1",
        f"trainer.devices={ranks}", f"trainer.pretrain.batch_size={batch}",
        f"paths.output_dir={out}", f"paths.cache_dir={cache}", RECORD, *extra,
    ]  # fmt: skip


def train_here(out: Path, cache: Path, batch: int, *extra: str) -> None:
    """train_settings' one-process run in this process (what `python -m ssmax.train` runs
    after its checks): a reference that needs no interpreter of its own."""
    train_config(compose(*train_settings(out, cache, 1, batch, *extra)))


def train_command(out: Path, cache: Path, ranks: int, batch: int, *extra: str) -> list[str]:
    """train_settings as a command: `python -m ssmax.train`, under torchrun for ranks > 1."""
    settings = train_settings(out, cache, ranks, batch, *extra)
    if ranks == 1:
        return [sys.executable, "-m", "ssmax.train", *settings]
    launcher = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
                f"--master_port={free_port()}"]  # fmt: skip
    return [*launcher, "-m", "ssmax.train", *settings]


def run(command: list[str]) -> None:
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]


def rows(batches: list[torch.Tensor]) -> list[tuple[int, ...]]:
    return sorted(tuple(r.tolist()) for b in batches for r in b)


def step_rows(out: Path, rank: int = 0) -> dict[int, list[tuple[int, ...]]]:
    """{optimizer step: the rows (sorted) one rank trained on in it}."""
    return {step: rows(b) for step, b in load_batches(out / RUN, rank).items()}
