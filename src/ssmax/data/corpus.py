"""Pretraining documents: the embedded corpus or SlimPajama, split train/validation/test.

Embedded documents (and local SlimPajama files given as one list) are assigned to a split by a
hash of their text, so the split never depends on file order and duplicates never leak across.
"""

from __future__ import annotations

import hashlib
import lzma
from functools import lru_cache
from pathlib import Path

from omegaconf import DictConfig

from ssmax.data.hub import offline, require_hub
from ssmax.files.atomic import atomic_write_bytes

SPLITS = ("train", "validation", "test")
EMBEDDED_FILE = Path(__file__).resolve().parents[3] / "data" / "embedded" / "austen.jsonl.xz"


@lru_cache(maxsize=4)
def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def embedded_sha() -> str:
    """sha256 of the shipped corpus file: part of every cache key built on it."""
    return file_sha256(EMBEDDED_FILE)


def split_of(text: str, val_fraction: float, test_fraction: float) -> str:
    """Deterministic split of one document from a hash of its text."""
    u = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") / 2**64
    if u < test_fraction:
        return "test"
    if u < test_fraction + val_fraction:
        return "validation"
    return "train"


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split={split!r}; allowed: {SPLITS}")


def embedded_jsonl(data_cfg: DictConfig) -> Path:
    """The shipped corpus decompressed once into the cache (datasets reads plain jsonl)."""
    out = Path(data_cfg.cache_dir) / "embedded" / f"austen-{embedded_sha()[:16]}.jsonl"
    if not out.exists():
        atomic_write_bytes(out, lzma.decompress(EMBEDDED_FILE.read_bytes()))
    return out


def _hf_cache(data_cfg: DictConfig) -> str:
    return str(Path(data_cfg.cache_dir) / "hf")


def _select_split(ds, split: str, data_cfg: DictConfig):
    """Keep the documents of one hashed split (works for Dataset and IterableDataset)."""
    val, test = float(data_cfg.val_fraction), float(data_cfg.test_fraction)
    if split != "train" and (val if split == "validation" else test) <= 0:
        raise ValueError(
            f"data.{'val' if split == 'validation' else 'test'}_fraction must be > 0 to take a "
            f"{split} split from one file list (or give a mapping split -> files)"
        )
    keep = lambda ex: split_of(ex["text"], val, test) == split  # noqa: E731
    if hasattr(ds, "select"):  # map-style: index selection keeps a stable fingerprint
        return ds.select([i for i, t in enumerate(ds["text"]) if keep({"text": t})])
    return ds.filter(keep)


def load_embedded(data_cfg: DictConfig, split: str):
    """The embedded corpus split as a datasets.Dataset (columns text, book, chapter)."""
    import datasets

    _check_split(split)
    with offline():
        ds = datasets.load_dataset(
            "json",
            data_files=str(embedded_jsonl(data_cfg)),
            split="train",
            cache_dir=_hf_cache(data_cfg),
        )
    return _select_split(ds, split, data_cfg)


def _as_files(value) -> list[str]:
    files = [value] if isinstance(value, str) else list(value)
    missing = [f for f in files if not Path(f).exists()]
    if missing:
        raise FileNotFoundError(f"data.slimpajama_files: no such file {missing[0]}")
    return [str(f) for f in files]


def load_slimpajama(data_cfg: DictConfig, split: str):
    """SlimPajama documents as a streaming datasets.IterableDataset with a "text" column.

    data.slimpajama_files: a mapping split -> file(s), or one file/list split by hash; local
    jsonl / jsonl.zst in SlimPajama's format. Without it, the hub (fast-failing if unreachable).
    """
    import datasets

    _check_split(split)
    local = data_cfg.slimpajama_files
    if local:
        by_split = isinstance(local, DictConfig | dict)
        files = _as_files(local[split] if by_split else local)
        with offline():
            ds = datasets.load_dataset("json", data_files=files, split="train", streaming=True)
        if not by_split:
            ds = _select_split(ds, split, data_cfg)
    else:
        require_hub(data_cfg.hf_slimpajama, "data.slimpajama_files")
        ds = datasets.load_dataset(data_cfg.hf_slimpajama, split=split, streaming=True)
    return ds.select_columns(["text"])


def load_documents(data_cfg: DictConfig, split: str):
    """Documents of one split: Dataset (embedded) or IterableDataset (slimpajama)."""
    if data_cfg.source == "embedded":
        return load_embedded(data_cfg, split)
    if data_cfg.source == "slimpajama":
        return load_slimpajama(data_cfg, split)
    raise ValueError(f"data.source={data_cfg.source!r}; allowed: ('embedded', 'slimpajama')")


def is_streaming(data_cfg: DictConfig) -> bool:
    return data_cfg.source == "slimpajama"
