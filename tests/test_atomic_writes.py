"""ssmax.files.atomic: a file or folder appears whole or not at all, and nothing is left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ssmax.files.atomic import (
    atomic_copy,
    atomic_dir,
    atomic_open,
    atomic_torch_save,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    remove_temporaries,
)


def test_writes_replace_whole_files_and_leave_no_temporaries(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "a.json"
    atomic_write_json(target, {"x": 1}, indent=2)
    assert json.loads(target.read_text()) == {"x": 1}
    atomic_write_text(target, "new")
    atomic_write_bytes(tmp_path / "b.bin", b"\x00\x01")
    atomic_copy(tmp_path / "b.bin", tmp_path / "c.bin")
    atomic_torch_save({"w": torch.ones(2)}, tmp_path / "m.pt")
    assert target.read_text() == "new" and (tmp_path / "c.bin").read_bytes() == b"\x00\x01"
    assert torch.load(tmp_path / "m.pt")["w"].sum() == 2
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_open(target, "w") as handle:
        handle.write("half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old" and sorted(tmp_path.iterdir()) == [target]


def test_atomic_dir_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    with atomic_dir(tmp_path / "out") as tmp:
        (tmp / "f").write_text("1")
        assert not (tmp_path / "out").exists()
    assert (tmp_path / "out" / "f").read_text() == "1"
    with pytest.raises(RuntimeError), atomic_dir(tmp_path / "other") as tmp:
        (tmp / "f").write_text("1")
        raise RuntimeError("interrupted")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_remove_temporaries_clears_what_a_killed_writer_left(tmp_path: Path) -> None:
    """A writer killed before its rename leaves its temporary (file or folder); only those
    go, of the names asked for, below the folder unless not recursive."""
    (tmp_path / "ckpt").mkdir()
    left = [
        tmp_path / ".done.json.123.0a1b2c3d.tmp",
        tmp_path / "ckpt" / ".last.ckpt.9.deadbeef.tmp",
    ]
    for path in left:
        path.write_bytes(b"half")
    folder = tmp_path / ".sft.77.01234567.tmp"  # an atomic_dir's
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    kept = [tmp_path / "done.json", tmp_path / ".hidden.tmp", tmp_path / "x.123.0a1b2c3d.tmp"]
    for path in kept:
        path.write_text("whole")
    assert remove_temporaries(tmp_path, names=("done.json",), recursive=False) == [left[0]]
    assert sorted(remove_temporaries(tmp_path)) == sorted([left[1], folder])
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == sorted(kept)
    assert remove_temporaries(tmp_path / "none") == []
