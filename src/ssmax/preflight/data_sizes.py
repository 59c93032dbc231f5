"""Data that would leave a run nothing to train or evaluate on: one line naming the setting
and the data's size (ConfigError), instead of a run that trains 0 steps, or validates on
nothing, and reports success.

A pretraining split packs into rows of data.seq_len + 1 tokens (ssmax.data.packing.pack; the
tail is dropped); training drops a last partial batch, so each device needs a whole batch of
rows; validation needs one row. An SFT split needs one example that passes the SQuAD filter.

Two places ask:
- before any work (check_data_sizes, from check_inputs): what is known without a tokenizer.
  data.shards_dir's manifest counts its tokens exactly; the embedded corpus's split has at
  most one token per UTF-8 byte plus one end-of-document token per document (a byte-level
  BPE's token is at least one byte), so a seq_len past that is refused for sure; the
  generated SFT set's answerable examples per split are counted exactly (its rows' first
  draws). A SlimPajama stream, or a SQuAD file, is not counted here.
- when the data is built (ssmax.data.lm_module, ssmax.data.sft_batches), with the exact
  token count, before the run writes anything where it can (ssmax.lit.trainer.train).

Bookkeeping: it shapes no result (ssmax.pipeline.stage_code.NO_RESULT).
"""

from __future__ import annotations

import json
import lzma
from functools import lru_cache
from pathlib import Path

from omegaconf import DictConfig

from ssmax.config.compose import ConfigError
from ssmax.data.corpus import EMBEDDED_FILE, embedded_sha, split_of
from ssmax.data.shards import read_manifest
from ssmax.data.sizes import SPLIT_NAMES, check_rows
from ssmax.data.squad_gen import answerable_per_split


def batch_need(cfg: DictConfig) -> tuple[int, str]:
    """(rows, what needs them): one whole pretraining batch on every device."""
    t = cfg.trainer
    ranks = int(t.devices) * int(t.num_nodes)
    devices = f"{ranks} devices" if ranks > 1 else "1 device"
    return ranks * int(t.pretrain.batch_size), (
        f"trainer.pretrain.batch_size={t.pretrain.batch_size} on {devices}")  # fmt: skip


@lru_cache(maxsize=8)
def embedded_bytes(cached: Path | None, val: float, test: float) -> dict[str, tuple[int, int]]:
    """split -> (UTF-8 bytes, documents) of the embedded corpus, split as ssmax.data.corpus
    splits it; read from its decompressed copy in the cache when there is one (writes none)."""
    raw = cached.read_bytes() if cached is not None else lzma.decompress(EMBEDDED_FILE.read_bytes())
    sizes = {"train": (0, 0), "validation": (0, 0), "test": (0, 0)}
    for line in raw.splitlines():
        if line.strip():
            text = json.loads(line)["text"]
            split = split_of(text, val, test)
            sizes[split] = (sizes[split][0] + len(text.encode("utf-8")), sizes[split][1] + 1)
    return sizes


def _embedded_copy(data: DictConfig) -> Path | None:
    copy = Path(data.cache_dir) / "embedded" / f"austen-{embedded_sha()[:16]}.jsonl"
    return copy if copy.is_file() else None


def split_tokens(data: DictConfig) -> tuple[dict[str, int], str, str] | None:
    """(split -> tokens, where, at_most) of what pretraining reads, as far as known before
    any work; None for a stream."""
    if data.shards_dir:
        splits = read_manifest(data.shards_dir)["splits"]
        tokens = {s: sum(int(f["tokens"]) for f in splits[s]["files"]) for s in splits}
        return tokens, f"data.shards_dir={data.shards_dir}", ""
    if data.source != "embedded":
        return None
    sizes = embedded_bytes(_embedded_copy(data), float(data.val_fraction),
                           float(data.test_fraction))  # fmt: skip
    tokens = {s: size + docs for s, (size, docs) in sizes.items()}
    return tokens, "the embedded corpus", " (a token a UTF-8 byte, and a document end each)"


def check_lm_sizes(cfg: DictConfig) -> None:
    """Pretraining's splits: a whole batch a device for training (where it takes a step), a
    sequence for validation."""
    known = split_tokens(cfg.data)
    if known is None:
        return
    tokens, where, at_most = known
    seq_len = int(cfg.data.seq_len)
    if int(cfg.trainer.pretrain.max_steps) > 0 and "train" in tokens:
        need, per = batch_need(cfg)
        check_rows("train", tokens["train"], seq_len, need, where, per, at_most)
    if "validation" in tokens:
        if tokens["validation"] == 0:
            raise ConfigError(
                f"data.val_fraction={cfg.data.val_fraction} leaves no validation sequence: "
                f"{where}'s validation split holds no document; raise data.val_fraction"
            )
        check_rows("validation", tokens["validation"], seq_len, 1, where, at_most=at_most)


def check_sft_sizes(cfg: DictConfig) -> None:
    """The generated SFT set: an example of each split that passes the SQuAD filter."""
    data = cfg.data
    if data.sft_source != "generated":
        return
    counts = answerable_per_split(data)
    for split in ("train", "validation"):
        if counts[split] == 0:
            raise ConfigError(
                f"data.sft_num_examples={data.sft_num_examples} leaves no SFT "
                f"{SPLIT_NAMES[split]} example: none of the generated examples is both "
                f"answerable (the SQuAD filter; data.sft_unanswerable_fraction="
                f"{data.sft_unanswerable_fraction}) and in the {split} split "
                f"(data.sft_val_fraction={data.sft_val_fraction}); raise data.sft_num_examples"
            )


def check_data_sizes(cfg: DictConfig, pretrain: bool = True, sft: bool = True) -> None:
    """What the run trains and validates on is not empty, as far as known before any work."""
    if pretrain:
        check_lm_sizes(cfg)
    if sft:
        check_sft_sizes(cfg)
