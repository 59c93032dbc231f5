"""The files a run reads and writes, checked before any work (ssmax.preflight.settings checks
the values).

check_inputs(cfg) raises ConfigError, one line naming the key and the file (and the line in
it) and what to do, on: an output folder that cannot be written; an init_from that is missing,
no checkpoint, truncated, or of another model (the first tensor whose shape differs, both
shapes, what to set); local SlimPajama or SQuAD files that are missing, empty or do not parse.
Nothing is created: the output folder is probed with a temporary folder, removed at once.

A local jsonl file is read up to SAMPLE_LINES lines (SlimPajama's chunks are many and large);
a SQuAD file whole.
"""

from __future__ import annotations

import io
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from omegaconf import DictConfig

from ssmax.config.compose import ConfigError
from ssmax.data.identity import listed_files
from ssmax.data.squad import flatten_nested
from ssmax.preflight.data_sizes import check_data_sizes
from ssmax.preflight.weights import check_fits, read_weights

SAMPLE_LINES = 1000  # lines of each local jsonl file checked before the run
SQUAD_KEYS = ("id", "context", "question", "answers")  # a jsonl row (title is optional)


def check_inputs(cfg: DictConfig, sft: bool = True, pretrain: bool = True) -> None:
    """Every file cfg reads (SQuAD only when sft: the run fine-tunes), the output folder, and
    that the data leaves something to train and validate on (ssmax.preflight.data_sizes;
    pretraining's when pretrain, SFT's when sft)."""
    check_output_dir(cfg.paths.output_dir)
    if cfg.init_from:
        check_fits(cfg, read_weights(cfg.init_from, "init_from"), "init_from")
    data = cfg.data
    if data.source == "slimpajama" and data.slimpajama_files and not data.shards_dir:
        for path in listed_files(data.slimpajama_files):
            check_jsonl(path, "data.slimpajama_files", ("text",))
    if data.shards_dir and not (Path(data.shards_dir) / "manifest.json").is_file():
        raise ConfigError(
            f"data.shards_dir={data.shards_dir} holds no manifest.json: prepare it first "
            "(python -m ssmax.data.prepare ...), or set data.shards_dir=null to tokenize on the fly"
        )
    if sft and data.sft_source == "squad_v2" and data.squad_files:
        for path in listed_files(data.squad_files):
            check_squad(path)
    check_data_sizes(cfg, pretrain=pretrain, sft=sft)


# ------------------------------------------------------------------------------ output folder


def check_output_dir(output_dir: str) -> None:
    """The folder can be created and written: a temporary folder is made in it (or in its
    nearest existing parent) and removed."""
    path = Path(output_dir).expanduser().absolute()
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"paths.output_dir={output_dir}: {probe} is a file, not a folder")
    try:
        with tempfile.TemporaryDirectory(dir=probe, prefix=".ssmax-probe-"):
            pass
    except OSError as err:
        raise ConfigError(
            f"paths.output_dir={output_dir} cannot be written ({err.strerror} in {probe}); "
            "pick a folder you can write to"
        ) from None


# ------------------------------------------------------------------------------ data files


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        import gzip

        return gzip.open(path, "rt", encoding="utf-8")
    if path.suffix == ".zst":
        import zstandard

        raw = zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True)  # noqa: SIM115
        return io.TextIOWrapper(raw, encoding="utf-8")
    return open(path, encoding="utf-8")


def _readable(path: str, key: str, suffixes: tuple[str, ...]) -> Path:
    file = Path(path)
    if not file.exists():
        raise ConfigError(f"{key}: no such file {path}")
    if not file.is_file():
        raise ConfigError(f"{key}: {path} is a folder; give files ({', '.join(suffixes)})")
    if not path.endswith(suffixes):
        raise ConfigError(f"{key}: {path} has an unknown ending; allowed: {', '.join(suffixes)}")
    if file.stat().st_size == 0:
        raise ConfigError(f"{key}: {path} is empty")
    return file


def _lines(file: Path, key: str, limit: int | None) -> Iterator[tuple[int, str]]:
    """(line number, line) of the non-blank lines, up to limit of them."""
    seen = 0
    try:
        with _open_text(file) as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                yield number, line
                seen += 1
                if limit is not None and seen >= limit:
                    return
    except Exception as err:  # zstd, gzip, encoding and permission errors alike
        raise ConfigError(f"{key}: {file} cannot be read ({str(err)[:120]})") from None
    if seen == 0:
        raise ConfigError(f"{key}: {file} has no documents (only blank lines)")


def _row(file: Path, key: str, number: int, line: str, fields: tuple[str, ...]) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"{key}: {file} line {number} is not JSON ({err.msg}, column {err.colno}); "
            "one JSON object per line"
        ) from None
    absent = [f for f in fields if not isinstance(row, dict) or f not in row]
    if absent:
        raise ConfigError(f"{key}: {file} line {number} has no {absent[0]!r} field")
    return row


def check_jsonl(path: str, key: str, fields: tuple[str, ...]) -> None:
    """A jsonl(.zst) file: readable, not empty, its first SAMPLE_LINES lines JSON objects with
    these fields (SlimPajama: a "text" string)."""
    file = _readable(path, key, (".jsonl", ".json", ".zst", ".gz"))
    for number, line in _lines(file, key, SAMPLE_LINES):
        row = _row(file, key, number, line, fields)
        if "text" in fields and not isinstance(row["text"], str):
            raise ConfigError(f"{key}: {file} line {number}: 'text' is not a string")


def check_squad(path: str, key: str = "data.squad_files") -> None:
    """A SQuAD 2.0 file: the official nested .json, a flat .jsonl, or .parquet with its
    columns; each parsed whole."""
    file = _readable(path, key, (".json", ".jsonl", ".parquet"))
    if file.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            columns = set(pq.read_schema(file).names)
        except Exception as err:  # noqa: BLE001 - pyarrow's errors: the file is no parquet
            raise ConfigError(f"{key}: {file} is not a parquet file ({str(err)[:120]})") from None
        absent = [c for c in SQUAD_KEYS if c not in columns]
        if absent:
            raise ConfigError(f"{key}: {file} has no {absent[0]!r} column")
        return
    if file.suffix == ".jsonl":
        for number, line in _lines(file, key, None):
            _row(file, key, number, line, SQUAD_KEYS)
        return

    try:
        nested = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"{key}: {file} line {err.lineno} is not JSON ({err.msg}, column {err.colno})"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{key}: {file} cannot be read ({str(err)[:120]})") from None
    try:
        flatten_nested(nested)
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        raise ConfigError(
            f"{key}: {file} is JSON but not SQuAD 2.0's nested format ({type(err).__name__}: "
            f'{str(err)[:80]}); expected {{"data": [{{"paragraphs": [{{"qas": ...}}]}}]}}'
        ) from None
