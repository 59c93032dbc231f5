"""A frozen copy of the code for the jobs of a submission (executor.snapshot=true).

A job that waits in the queue imports the package when it starts, from the checkout as it is
then: an edit made meanwhile would run under the fingerprint of the code that was planned. With
a snapshot every job imports the code as it was when it was submitted: src/ and conf/, and the
published results that the report reads (docs/results/: a stage's declared files, StageSpec),
are copied to <output_dir>/pipeline/snapshots/<hash of their content>/ (one copy per distinct
content, shared by the submissions that have it), data/ is linked (fingerprints hash the data by
content), and each job's PYTHONPATH starts with the copy's src/, ahead of the editable install.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
from pathlib import Path

from ssmax.files.atomic import atomic_dir
from ssmax.tracking.manifest import COMMIT_ENV, git_commit

REPO = Path(__file__).resolve().parents[3]
COPIED = ("src", "conf", "docs/results")  # the code, and the files stages declare (StageSpec)
SKIP = ("__pycache__", "*.pyc", "*.egg-info")


def _files(root: Path) -> list[Path]:
    return sorted(
        p
        for d in COPIED
        for p in (root / d).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".pyc")
        and not any(part.endswith(".egg-info") for part in p.parts)
    )  # fmt: skip


def code_digest(root: Path = REPO) -> str:
    digest = hashlib.sha256()
    for path in _files(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def snapshot(output_dir: str | Path, root: Path = REPO) -> Path:
    """The snapshot of the current code under output_dir, made if missing."""
    dest = Path(output_dir) / "pipeline" / "snapshots" / code_digest(root)[:16]
    if dest.exists():
        return dest
    with atomic_dir(dest) as tmp:  # whole or not at all: a half copy is never used
        for name in COPIED:
            if (root / name).is_dir():  # a checkout without published results: none to copy
                shutil.copytree(root / name, tmp / name, ignore=shutil.ignore_patterns(*SKIP))
        (tmp / "data").symlink_to(root / "data", target_is_directory=True)
    return dest


def setup_lines(dest: Path) -> list[str]:
    """sbatch script lines that make the job import the snapshot's code, and record the
    commit this pipeline runs from (the copy is no repository: manifest.git_commit)."""
    src = shlex.quote(str(dest / "src"))
    return [f"export PYTHONPATH={src}${{PYTHONPATH:+:$PYTHONPATH}}",
            f"export {COMMIT_ENV}={shlex.quote(git_commit())}"]  # fmt: skip
