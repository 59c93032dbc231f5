"""Runs whose process is gone are closed, not left RUNNING forever.

A crash (SIGKILL, a lost machine, an ended SLURM job) ends a process before it can end its
MLflow run, which then shows work in progress that nobody is doing. Every run the project
starts carries where its process lives (process_tags: host, boot, pid and the pid's start time,
the SLURM job) and the folder it belongs to (folder_tag). When a pipeline starts in a folder,
and when `make report` or `make sync` read it, close_dead_runs sets that folder's RUNNING runs
whose process is known to be gone to KILLED, with an end time and a tag (CLOSED) saying what
was found. A run whose process may be alive is never touched: another host's process (its pid
says nothing here), a SLURM job still queued or running, a run without these tags (made before
them: nothing can be known of it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

PID, HOST, BOOT, STARTED = "ssmax.pid", "ssmax.host", "ssmax.boot_id", "ssmax.pid_start"
SLURM_JOB = "ssmax.slurm_job"  # the SLURM job of the process that started the run
FOLDER = "ssmax.folder"  # <host>:<output folder>: a server holds other folders' runs too
CLOSED = "ssmax.closed"  # why a later start set the run KILLED


def boot_id() -> str:
    """This boot of this machine (a pid means nothing across a restart); "" where unknown."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def pid_start(pid: int) -> str | None:
    """When process pid started (clock ticks since boot), telling it from a later process that
    reuses its number; None when there is no such process. "" where /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return ""
    fields = stat.rpartition(")")[2].split()  # the name before ')' may hold spaces
    if fields and fields[0] == "Z":  # a zombie: ended, only its parent has not read it yet
        return None
    return fields[19] if len(fields) > 19 else ""


def process_tags() -> dict[str, str]:
    """Where this process lives, for the runs it starts."""
    tags = {PID: str(os.getpid()), HOST: socket.gethostname(), BOOT: boot_id(),
            STARTED: pid_start(os.getpid()) or ""}  # fmt: skip
    if os.environ.get("SLURM_JOB_ID"):
        tags[SLURM_JOB] = os.environ["SLURM_JOB_ID"]
    return tags


def folder_tag(output_dir: str | Path) -> dict[str, str]:
    return {FOLDER: f"{socket.gethostname()}:{Path(output_dir).resolve()}"}


def hand_to_job(client: Any, run_id: str, job: str) -> None:
    """The run is ended by SLURM job `job` from now on (a pipeline's closing job), not by the
    process that started it, which exits after submitting: its liveness is that job's."""
    client.set_tag(run_id, SLURM_JOB, job)
    tags = client.get_run(run_id).data.tags
    for key in (PID, STARTED):
        if key in tags:
            client.delete_tag(run_id, key)


def slurm_job_ended(job: str) -> bool | None:
    """Whether SLURM says the job is over (squeue no longer lists it as pending or running);
    None where squeue is not here or does not answer."""
    if shutil.which("squeue") is None:
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                             text=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:  # "Invalid job id": purged after it ended
        return "Invalid job id" in out.stderr or None
    states = out.stdout.split()
    return not any(s in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED",
                         "RESIZING", "SUSPENDED") for s in states)  # fmt: skip


def gone(tags: dict[str, str]) -> str | None:
    """What shows that the process of a run with these tags is gone; None when it may live."""
    job = tags.get(SLURM_JOB)
    if job:
        ended = slurm_job_ended(job)
        if ended is not None:
            return f"its SLURM job {job} had ended" if ended else None
    host, pid = tags.get(HOST), tags.get(PID)
    if not pid or host != socket.gethostname():
        return None  # another machine's process: its pid says nothing here
    if tags.get(BOOT) and tags[BOOT] != boot_id():
        return f"{host} had restarted since process {pid} started"
    start = pid_start(int(pid))
    if start is None or (start and tags.get(STARTED) and start != tags[STARTED]):
        return f"process {pid} on {host} was gone"
    return None


def close_dead_runs(client: Any, output_dir: str | Path) -> list[Any]:
    """Set the folder's RUNNING runs whose process is gone to KILLED (end time now, CLOSED
    saying what was found); returns those runs."""
    folder = folder_tag(output_dir)[FOLDER].replace("'", "\\'")
    experiments = [e.experiment_id for e in client.search_experiments()]
    if not experiments:
        return []
    query = f"attributes.status = 'RUNNING' and tags.`{FOLDER}` = '{folder}'"
    closed = []
    for run in client.search_runs(experiments, query, max_results=10_000):
        reason = gone(run.data.tags)
        if reason is None:
            continue
        when = time.strftime("%Y-%m-%d %H:%M:%S")
        client.set_tag(run.info.run_id, CLOSED, f"{reason} when the folder was next read ({when})")
        client.set_terminated(run.info.run_id, "KILLED", int(time.time() * 1000))
        closed.append(run)
    return closed


def closed_line(closed: list[Any]) -> str | None:
    """One line naming what close_dead_runs closed: the pipeline runs (the predecessors) by
    name, the nodes' runs counted; None when it closed nothing."""
    if not closed:
        return None
    pipelines = [r.info.run_name for r in closed if r.data.tags.get("kind") == "pipeline"]
    nodes = [r.info.run_name for r in closed if r.data.tags.get("kind") != "pipeline"]
    parts = [f"pipeline run {', '.join(pipelines)}"] if pipelines else []
    if nodes:
        shown = ", ".join(nodes[:3]) + (", ..." if len(nodes) > 3 else "")
        parts.append(f"{len(nodes)} node run{'s' * (len(nodes) != 1)} ({shown})")
    return (f"closed {' and '.join(parts)}: left RUNNING by processes that are gone, now "
            f"KILLED (tag {CLOSED} says why)")  # fmt: skip
