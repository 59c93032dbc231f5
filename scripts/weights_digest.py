"""A digest of each node's weights under the folders given, to compare runs bit for bit across
machines and torch versions: `python scripts/weights_digest.py <nodes folder> ...` prints one
line a weights file, `<node> <file> <sha256 of its tensors, 16 hex>`, sorted. The digest reads
the tensors (names, dtypes, shapes, bytes), not the file: torch.save's zip records differ
between torch versions for the same tensors.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import torch

from ssmax.config.compose import ConfigError
from ssmax.preflight.weights import read_weights


def digest(path: Path) -> str:
    """sha256 over the state dict's names, dtypes, shapes and bytes, in name order."""
    state = read_weights(path, key="weights")  # a damaged file: one line naming it
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def main(folders: list[str]) -> None:
    if not folders:
        sys.exit("usage: weights_digest.py FOLDER [FOLDER ...] (folders holding nodes' model*.pt)")
    for folder in map(Path, folders):
        if not folder.is_dir():
            sys.exit(f"weights_digest.py: {folder} is not a folder")
        for path in sorted(folder.rglob("model*.pt")):
            node = path.parent.parent.relative_to(folder)  # <node>/<fingerprint>/model*.pt
            try:
                print(f"{node} {path.name} {digest(path)}")
            except ConfigError as err:
                sys.exit(f"weights_digest.py: {err}")


if __name__ == "__main__":
    main(sys.argv[1:])
