"""A manifest that reproduces a run: what ran it, beside the commit.

The commit alone does not say which code ran (a dirty work tree), on which packages, on which
machine. The pipeline's run logs the whole manifest (tags, `manifest/manifest.json`,
`manifest/packages.txt`, `manifest/git.diff` when the tree is dirty); every node's run and
done record carry the short part (NODE_KEYS: the package set's hash, host, CPU, GPUs, SLURM
job), so nodes run elsewhere, or cached from an older environment, can be told apart.

Cheap on purpose: nothing here imports torch at module level (`python -m ssmax.pipeline plan`
needs only packages_sha, computed once per process).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).resolve().parent  # the checkout whose commit the runs record
NODE_KEYS = ("packages_sha", "host", "cpu", "gpus")  # every node's run and done record
SLURM_KEYS = ("slurm_job_id", "slurm_array_task")  # where a SLURM job ran the node
PIPELINE_TAGS = ("dirty", *NODE_KEYS, "python", "torch", "cuda", "cudnn", "nccl")
COMMIT_ENV = "SSMAX_GIT_COMMIT"  # the commit a snapshot's pipeline ran from (git_commit)


def _git(args: list[str], cwd: Path) -> str | None:
    """A git command's output, None where git or the repository is not there."""
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=30,
                             cwd=cwd, errors="replace")  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def _head(where: Path) -> str:
    """The commit checked out in `where`; "unknown" outside a repository."""
    return (_git(["rev-parse", "HEAD"], where) or "").strip() or "unknown"


@cache
def git_commit() -> str:
    """The commit this code runs from (every run's tag, every node's record): once a process.
    Code that runs from a snapshot (pipeline.snapshot: a copy, not a repository) takes the
    commit its pipeline ran from, which the pipeline passes in COMMIT_ENV."""
    head = _head(SOURCE)
    return os.environ.get(COMMIT_ENV, head) if head == "unknown" else head


def git_state(cwd: str | Path | None = None) -> dict[str, Any]:
    """The commit, whether the work tree differs from it (untracked files count: a new module
    runs too), and the difference: `git diff HEAD` with the untracked files listed after it.
    dirty is None outside a repository."""
    where = Path(cwd) if cwd is not None else SOURCE
    commit = _head(where)
    status = _git(["status", "--porcelain", "--untracked-files=all"], where)
    if status is None:
        return {"commit": commit, "dirty": None, "diff": "", "untracked": []}
    untracked = [line[3:] for line in status.splitlines() if line.startswith("?? ")]
    diff = _git(["diff", "HEAD", "--no-color", "--no-ext-diff"], where) or ""
    if untracked:
        diff += "\n# untracked files (not in the diff above):\n" + "".join(
            f"#   {path}\n" for path in untracked
        )
    dirty = bool(status.strip())
    return {"commit": commit, "dirty": dirty, "diff": diff if dirty else "", "untracked": untracked}


def site_dirs() -> list[str]:
    """Where this interpreter installs packages. Not sys.path: importing setuptools puts its
    vendored copies (setuptools/_vendor) on sys.path, which would list them as installed."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    dirs = [paths["purelib"], paths["platlib"]]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return list(dict.fromkeys(d for d in dirs if Path(d).is_dir()))


def packages() -> list[str]:
    """The installed distributions, `name==version`, sorted (one per name); the same in every
    process of one environment, whatever each imported."""
    from importlib.metadata import distributions

    found = {
        f"{d.metadata['Name']}=={d.version}"
        for d in distributions(path=site_dirs())
        if d.metadata["Name"]
    }
    return sorted(found, key=str.lower)


@cache
def packages_sha() -> str:
    """A short hash of packages(): equal hashes, equal package sets. Once per process."""
    return hashlib.sha256("\n".join(packages()).encode()).hexdigest()[:12]


def cpu_model() -> str:
    """/proc/cpuinfo's model name (Linux x86), else what platform says (aarch64: the ISA)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def torch_versions() -> dict[str, str]:
    """torch and the CUDA stack it runs on ("none" without CUDA), and the GPUs' names. It
    initializes CUDA where there is one: called where a run starts, never by plan."""
    import torch

    cuda = torch.cuda.is_available()
    cudnn = torch.backends.cudnn.version() if cuda else None
    try:
        nccl = torch.cuda.nccl.version() if cuda else None
    except (AttributeError, RuntimeError):  # a build without NCCL
        nccl = None
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else []
    return {
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda) if cuda and torch.version.cuda else "none",
        "cudnn": str(cudnn) if cudnn else "none",
        "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl or "none"),
        "gpus": ", ".join(gpus) or "none",
    }


def slurm_tags() -> dict[str, str]:
    """The SLURM job running this process (absent outside SLURM); an array task as
    <array job>_<task>, as squeue and sacct name it."""
    tags = {}
    if os.environ.get("SLURM_JOB_ID"):
        tags["slurm_job_id"] = os.environ["SLURM_JOB_ID"]
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        task = os.environ.get("SLURM_ARRAY_TASK_ID", "")
        tags["slurm_array_task"] = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{task}"
    return tags


def node_tags() -> dict[str, str]:
    """What a node's run and done record keep of the machine it ran on (NODE_KEYS, and the
    SLURM job where there is one). Once per process: none of it changes while it runs."""
    return dict(_node_tags())


@cache
def _node_tags() -> dict[str, str]:
    gpus = torch_versions()["gpus"]
    return {"packages_sha": packages_sha(), "host": socket.gethostname(), "cpu": cpu_model(),
            "gpus": gpus, **slurm_tags()}  # fmt: skip


def manifest(cwd: str | Path | None = None) -> dict[str, Any]:
    """Everything a run needs to be made again: the code (commit, dirty, diff), the packages
    (their list and hash), the interpreter and CUDA stack, the machine, the SLURM job."""
    return {
        "git": git_state(cwd),
        "packages": packages(),
        "packages_sha": packages_sha(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        **torch_versions(),
        **slurm_tags(),
    }


def pipeline_tags(found: dict[str, Any]) -> dict[str, str]:
    """The tags of a pipeline's run from its manifest: dirty, the package hash, the machine,
    python and the CUDA stack."""
    dirty = found["git"]["dirty"]
    tags = {k: str(found[k]) for k in PIPELINE_TAGS if k != "dirty"}
    tags["dirty"] = "unknown" if dirty is None else str(dirty).lower()
    return tags | {k: found[k] for k in SLURM_KEYS if k in found}


def log_manifest(client: Any, run_id: str, cwd: str | Path | None = None) -> dict[str, Any]:
    """Log the manifest on a run (the pipeline's): its tags, manifest/manifest.json,
    manifest/packages.txt and, where the work tree is dirty, manifest/git.diff."""
    from mlflow.entities import RunTag

    found = manifest(cwd)
    tags = [RunTag(k, v) for k, v in pipeline_tags(found).items()]
    client.log_batch(run_id, tags=tags)
    client.log_text(run_id, "\n".join(found["packages"]) + "\n", "manifest/packages.txt")
    if found["git"]["dirty"]:
        client.log_text(run_id, found["git"]["diff"], "manifest/git.diff")
    summary = {k: v for k, v in found.items() if k != "packages"}  # in packages.txt
    summary["git"] = {k: v for k, v in found["git"].items() if k != "diff"}  # in git.diff
    client.log_text(run_id, json.dumps(summary, indent=2), "manifest/manifest.json")
    return found
