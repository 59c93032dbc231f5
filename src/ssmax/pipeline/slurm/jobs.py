"""SLURM queue and status: job states (squeue, sacct), the job book (which job runs which
node, <output_dir>/pipeline/slurm_jobs.json) and the `status` command's table."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from ssmax.config.compose import ConfigError
from ssmax.files.atomic import atomic_write_json
from ssmax.files.flock import exclusive

if TYPE_CHECKING:
    from ssmax.pipeline.job import NodeJob

# SLURM states of a job that is still queued or running (squeue's %T).
ACTIVE = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
    "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "STOPPED",
})  # fmt: skip
NEVER = "DependencyNeverSatisfied"  # squeue's reason for a job whose upstream failed
LOG_LINES = 12


def _client(*args: str) -> str:
    conf = os.environ.get("SLURM_CONF")
    if conf and not Path(conf).is_file():  # the clients would spend a minute finding that out
        raise ConfigError(f"cannot query SLURM ({args[0]}): SLURM_CONF={conf} does not exist "
                          "(is the cluster down?)")  # fmt: skip
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ConfigError(f"cannot query SLURM ({args[0]}): {err}") from err
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or [""])[-1]  # one line, not the whole story
        raise ConfigError(f"cannot query SLURM ({' '.join(args[:2])}): {last} "
                          "(is SLURM_CONF set?)")  # fmt: skip
    return out.stdout


def query_states(ids: list[str]) -> dict[str, tuple[str, str]]:
    """job id -> (SLURM state, reason). squeue knows every live job; sacct the ones squeue has
    forgotten (MinJobAge). A job neither knows is left out (lost: treated as not running)."""
    states: dict[str, tuple[str, str]] = {}
    if not ids:
        return states
    wanted = set(ids)
    for line in _client("squeue", "--me", "-h", "-t", "all", "-o", "%i|%T|%r").splitlines():
        job_id, state, reason = (line.split("|") + ["", ""])[:3]
        if job_id in wanted:
            states[job_id] = (state, reason)
    missing = [i for i in ids if i not in states]
    if missing and shutil.which("sacct"):
        out = _client("sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", ",".join(missing))
        for line in out.splitlines():
            job_id, _, state = line.partition("|")
            if job_id in wanted and state:
                states[job_id] = (state.split()[0], "")  # "CANCELLED by 0" -> CANCELLED
    return states


# ---------------------------------------------------------------- the job book (state file)


def book_path(cfg: DictConfig) -> Path:
    return Path(cfg.paths.output_dir) / "pipeline" / "slurm_jobs.json"


def _key(job: NodeJob) -> str:
    return f"{job.name}@{job.fingerprint}"


@contextmanager
def _locked_book(cfg: DictConfig) -> Iterator[dict[str, Any]]:
    """The book, read under an exclusive lock (two clients must not both submit a node) and
    written back atomically when the block ends."""
    path = book_path(cfg)
    with exclusive(path.with_suffix(".lock")):
        book = read_book(cfg)
        yield book
        atomic_write_json(path, book, indent=2, sort_keys=True)


def read_book(cfg: DictConfig) -> dict[str, Any]:
    path = book_path(cfg)
    book = json.loads(path.read_text()) if path.exists() else {}
    return {"nodes": book.get("nodes", {}), "runs": book.get("runs", {})}


# ---------------------------------------------------------------- status


@dataclass
class NodeStatus:
    name: str
    state: str  # cached | done | queued | running | failed | blocked | to-run | unknown
    job_id: str | None = None
    slurm_state: str = ""
    reason: str = ""
    log: Path | None = None  # the job's stderr, for failed nodes

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running")


def node_states(
    cfg: DictConfig, jobs: list[NodeJob], book: dict[str, Any], ask_slurm: bool = True
) -> list[NodeStatus]:
    """Each node's state from its done-marker, its recorded job and that job's SLURM state.
    Without ask_slurm (SLURM unreachable) a node with a job but no done-marker is 'unknown'."""
    records = {job.name: book["nodes"].get(_key(job)) for job in jobs}
    ids = [r["job_id"] for r in records.values() if r]
    slurm = query_states(ids) if ids and ask_slurm else {}
    folder = _folder(cfg)
    out: dict[str, NodeStatus] = {}
    for job in jobs:  # inputs come first
        record = records[job.name]
        job_id = record["job_id"] if record else None
        state, reason = slurm.get(job_id, ("", "")) if job_id else ("", "")
        status = NodeStatus(job.name, "to-run", job_id, state, reason)
        upstream_bad = any(out[i].state in ("failed", "blocked") for i in job.input_dirs)
        if job.done is not None:
            status.state = "done" if record else "cached"
        elif job_id and not ask_slurm:
            status.state = "unknown"
        elif state in ACTIVE:
            status.state = "blocked" if reason == NEVER else (
                "queued" if state == "PENDING" else "running")  # fmt: skip
        elif job_id and (reason == NEVER or upstream_bad):
            status.state = "blocked"
        elif job_id:  # ended (or forgotten by SLURM) without a done-marker
            status.state = "failed"
            status.slurm_state = state or "UNKNOWN"
            status.log = _log_path(folder, job_id)
        elif upstream_bad:
            status.state = "blocked"
        out[job.name] = status
    return list(out.values())


def _folder(cfg: DictConfig) -> Path:
    return Path(cfg.paths.output_dir) / "pipeline" / "slurm"


def _log_path(folder: Path, job_id: str) -> Path:
    from submitit.core.utils import JobPaths

    paths = JobPaths(folder, job_id=job_id, task_id=0)
    return paths.stderr if paths.stderr.exists() else paths.stdout


def log_tail(path: Path | None, lines: int = LOG_LINES) -> str:
    if path is None or not path.exists():
        return "(no log: the job did not start)"
    return "\n".join(path.read_text(errors="replace").rstrip().splitlines()[-lines:])


def format_status(statuses: list[NodeStatus]) -> str:
    lines = []
    for s in statuses:
        job = f"job {s.job_id}" if s.job_id else ""
        slurm = f"{s.slurm_state} ({s.reason})" if s.reason not in ("", "None") else s.slurm_state
        lines.append(f"{s.state:<8} {s.name:<48} {job:<10} {slurm}".rstrip())
        if s.state == "failed":
            lines.append(f"         log: {s.log}")
            lines += [f"         | {line}" for line in log_tail(s.log).splitlines()]
    lines.append(summary(statuses))
    return "\n".join(lines)


def summary(statuses: list[NodeStatus]) -> str:
    order = ("cached", "done", "queued", "running", "failed", "blocked", "to-run", "unknown")
    counts = {s: sum(x.state == s for x in statuses) for s in order}
    return f"{len(statuses)} nodes: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)


def print_status(cfg: DictConfig, jobs: list[NodeJob]) -> int:
    """`status` for a pipeline run on SLURM; non-zero when a node failed or is blocked, or when
    SLURM cannot be asked (then what the disk knows is shown: done and cached nodes)."""
    book = read_book(cfg)
    try:
        statuses = node_states(cfg, jobs, book)
    except ConfigError as err:  # no cluster, SLURM_CONF unset, slurmctld down
        statuses = node_states(cfg, jobs, book, ask_slurm=False)
        print(format_status(statuses))
        print(f"SLURM could not be queried, so the nodes with a job are 'unknown': {err}")
        return 1
    print(format_status(statuses))
    return 1 if any(s.state in ("failed", "blocked") for s in statuses) else 0
