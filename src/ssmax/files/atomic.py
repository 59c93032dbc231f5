"""Atomic writes: every file and folder the project writes appears whole or not at all.

A file is written to a temporary name in the same folder (same filesystem), flushed and
fsync'ed, then renamed over the target with os.replace; a reader (another rank, a job, the
report) sees the old file or the new one, never a partial one. A folder is built under a
temporary name and renamed into place the same way.

A process killed before its rename leaves its temporary behind (never read: its name is not the
target's); remove_temporaries clears a folder of them where no one else can be writing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def _temporary(path: Path) -> Path:
    """A name beside path that no other process or thread picks (the umask sets its mode)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


TEMPORARY = re.compile(r"\.(?P<target>.+)\.\d+\.[0-9a-f]{8}\.tmp")  # _temporary's names


def remove_temporaries(
    folder: str | Path, names: tuple[str, ...] | None = None, recursive: bool = True
) -> list[Path]:
    """Remove the temporaries that atomic writes left in folder (and below it: recursive),
    those of the given target names only if any: their writer was killed before its rename.
    Only for a folder nobody writes now, which the caller owns (a node's folder as the node
    starts, the pipeline's records under its lock). Returns what it removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for path in folder.rglob(".*.tmp") if recursive else folder.glob(".*.tmp"):
        match = TEMPORARY.fullmatch(path.name)
        if match and (names is None or match["target"] in names):
            found.append(path)
    for path in found:
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    return found


@contextmanager
def atomic_open(path: str | Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """A file object to write `path` through (mode "wb" or "w"); it replaces `path` only when
    the body ends without an exception."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    try:
        with open(tmp, mode.replace("w", "x")) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_open(path, "wb") as handle:
        handle.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_open(path, "w") as handle:
        handle.write(text)


def atomic_write_json(path: str | Path, obj: Any, **dumps: Any) -> None:
    """json.dumps(obj, **dumps) written atomically."""
    atomic_write_text(path, json.dumps(obj, **dumps))


def atomic_copy(src: str | Path, dest: str | Path) -> None:
    with open(src, "rb") as source, atomic_open(dest, "wb") as target:
        shutil.copyfileobj(source, target)


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """torch.save written atomically (weights, Lightning checkpoints)."""
    import torch

    with atomic_open(path, "wb") as handle:
        torch.save(obj, handle)


@contextmanager
def atomic_path(dest: str | Path) -> Iterator[Path]:
    """A fresh temporary name beside `dest`, for a program that writes the file or folder
    itself (a database); renamed to `dest` when the body ends without an exception, removed
    otherwise."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(dest)
    try:
        yield tmp
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_dir(dest: str | Path) -> Iterator[Path]:
    """A fresh temporary folder beside `dest` to fill; renamed to `dest` when the body ends
    without an exception (dest must not exist then), removed otherwise."""
    with atomic_path(dest) as tmp:
        tmp.mkdir()
        yield tmp


def set_aside(path: str | Path, tag: str) -> Path:
    """Rename a file out of the way, beside it, as <name>.<tag>-<unix time> (kept to look at,
    never read again); one rename, so readers see it at its old name or not at all."""
    import time

    path = Path(path)
    aside = path.with_name(f"{path.name}.{tag}-{int(time.time())}")
    os.replace(path, aside)
    return aside
