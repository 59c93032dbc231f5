"""Pre-tokenized shards (written by ``python -m ssmax.data.prepare``): reading them.

A prepared folder holds, per split, the documents' tokens in corpus order, each document
followed by EOS, as uint16 files (``<split>-<i>.bin``) whose concatenation is the split's token
stream, and ``manifest.json`` (files, token and document counts, sha256 per file, tokenizer,
source). Row k of length T+1 is tokens [k (T+1), (k+1) (T+1)) of that stream (rows may span two
files; the tail is dropped), exactly as ``packing.pack`` cuts the tokenized documents. Rows are
a map-style dataset, so the training sampler gives them rank sharding and exact resume, and
DataLoader workers split batches, never rows twice. As for PackedDataset, index k (the sampler's
epoch * n + i) reads row k % n, and ``transform(row, k)`` may rewrite it (planted facts).
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from ssmax.config.compose import ConfigError
from ssmax.data.packing import split_chunk
from ssmax.data.tokenizer import Tokenizer

FORMAT = "ssmax-token-shards-1"
MANIFEST = "manifest.json"
DTYPE = np.uint16  # GPT-2's 50,257 ids fit; 2 bytes per token on disk
OPEN_FILES = 64  # memory maps kept open per process (a corpus can have thousands of files)


def read_manifest(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / MANIFEST
    if not path.exists():
        raise ConfigError(
            f"data.shards_dir={folder} has no {MANIFEST}: prepare it first with "
            "`python -m ssmax.data.prepare <the same data settings> data.shards_dir=...`"
        )
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise ConfigError(f"data.shards_dir={folder}: format {manifest.get('format')!r}, "
                          f"expected {FORMAT!r}; prepare it again")  # fmt: skip
    return manifest


def manifest_sha(folder: str | Path) -> str:
    """Identifies the prepared data (for node fingerprints); 'missing' before prepare."""
    path = Path(folder) / MANIFEST
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "missing"


class TokenShards(Dataset):
    """Rows {"input_ids", "labels"} [T] of one prepared split, at most ``limit`` of them."""

    def __init__(
        self,
        folder: str | Path,
        split: str,
        seq_len: int,
        tokenizer: Tokenizer,
        limit: int | None = None,
        transform: Callable[[torch.Tensor, int], dict[str, torch.Tensor]] | None = None,
    ) -> None:
        self.transform = transform
        manifest = read_manifest(folder)
        if manifest["tokenizer"] != tokenizer.name:
            raise ConfigError(
                f"data.shards_dir={folder} was prepared with tokenizer {manifest['tokenizer']}, "
                f"this run uses {tokenizer.name}: set data.tokenizer/vocab_size as for prepare"
            )
        if split not in manifest["splits"]:
            raise ConfigError(f"data.shards_dir={folder} has no {split} split; "
                              f"it has {sorted(manifest['splits'])}")  # fmt: skip
        files = manifest["splits"][split]["files"]
        self.paths = [Path(folder) / f["name"] for f in files]
        for path, entry in zip(self.paths, files, strict=True):
            size = path.stat().st_size if path.exists() else -1
            if size != entry["tokens"] * DTYPE().itemsize:
                raise ConfigError(f"data.shards_dir: {path} has {size} bytes, the manifest says "
                                  f"{entry['tokens']} tokens; prepare it again")  # fmt: skip
        self.starts = np.cumsum([0] + [f["tokens"] for f in files]).tolist()
        self.size = seq_len + 1
        rows = self.starts[-1] // self.size
        self.rows = rows if limit is None else min(rows, int(limit))
        self._maps: OrderedDict[int, np.memmap] = OrderedDict()

    def __len__(self) -> int:
        return self.rows

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        """One pass over the rows (indexing wraps around, so the default iteration would not
        end)."""
        return (self[k] for k in range(self.rows))

    def tokens(self, start: int, count: int) -> np.ndarray:
        """``count`` tokens of the split's stream from ``start`` (across file boundaries)."""
        parts, i = [], bisect.bisect_right(self.starts, start) - 1
        while count > 0:
            lo = start - self.starts[i]
            part = self._map(i)[lo : lo + count]
            parts.append(part)
            start, count, i = start + len(part), count - len(part), i + 1
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def __getitem__(self, k: int) -> dict[str, torch.Tensor]:
        if k < 0:
            raise IndexError(f"row {k}")
        tokens = self.tokens(k % self.rows * self.size, self.size).astype(np.int64)
        row = torch.from_numpy(tokens)
        return split_chunk(row) if self.transform is None else self.transform(row, k)

    def _map(self, i: int) -> np.memmap:
        """File i as a read-only memory map; the least recently used ones are closed."""
        if i in self._maps:
            self._maps.move_to_end(i)
        else:
            self._maps[i] = np.memmap(self.paths[i], dtype=DTYPE, mode="r")
            if len(self._maps) > OPEN_FILES:
                self._maps.popitem(last=False)
        return self._maps[i]

    def __getstate__(self) -> dict[str, Any]:  # DataLoader workers open their own maps
        return {**self.__dict__, "_maps": OrderedDict()}
