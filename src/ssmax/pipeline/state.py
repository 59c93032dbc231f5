"""On-disk state of nodes: one folder per (node, fingerprint), a done-marker written last.

    <output_dir>/pipeline/nodes/<stage>/<variant>/seed<k>/<fingerprint[:16]>/
        config.yaml   the node's resolved config
        done.json     {"fingerprint", "outputs", "run_id", "wall_s", "flops"}: written
                      atomically, last

A folder without done.json is unfinished work (a training node resumes from its checkpoint
there); one with done.json of the same fingerprint is a result. Old fingerprints' folders stay,
so going back to an earlier setting is a cache hit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ssmax.io import atomic_write_json

DONE = "done.json"


def node_dir(output_dir: str | Path, name: str, fingerprint: str) -> Path:
    return Path(output_dir) / "pipeline" / "nodes" / name / fingerprint[:16]


def read_record(directory: Path) -> dict[str, Any] | None:
    """The done record of this folder, whatever its fingerprint (None while unfinished)."""
    path = directory / DONE
    return json.loads(path.read_text()) if path.exists() else None


def read_done(directory: Path, fingerprint: str) -> dict[str, Any] | None:
    """The done record if this folder holds a finished result of exactly this fingerprint."""
    record = read_record(directory)
    return record if record is not None and record.get("fingerprint") == fingerprint else None


def write_done(directory: Path, record: dict[str, Any]) -> None:
    atomic_write_json(directory / DONE, record, indent=2, sort_keys=True)
