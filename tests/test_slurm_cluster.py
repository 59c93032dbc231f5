"""submitit against the real local SLURM cluster (slurm/cluster.sh, fixture `slurm_cluster`).

Each test waits on a deadline of its own, so a regression (e.g. a broken sacct stand-in leaving
job states UNKNOWN) fails fast instead of hanging the suite.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import cloudpickle
import pytest
import submitit
from submitit.core.utils import FailedJobError, UncompletedJobError
from submitit.slurm.slurm import SlurmJobEnvironment

from tests.slurm_fixtures import SlurmCluster

pytestmark = pytest.mark.slurm

# Ship this module's functions and classes by value: the job then need not import `tests`
# (it would only find it when pytest runs from the repository root).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

DEADLINE_S = 120.0  # hang guards: a loaded machine starts a job in seconds, never this


def _executor(folder: Path, timeout_min: int = 5) -> submitit.AutoExecutor:
    executor = submitit.AutoExecutor(folder=folder / "%j", cluster="slurm")
    # timeout_min > 10 where preemption is tested: submitit counts an interrupt as a time-out
    # when the job's guaranteed walltime is that short.
    executor.update_parameters(timeout_min=timeout_min, cpus_per_task=1, slurm_signal_delay_s=5)
    return executor


def _wait(job: submitit.Job, deadline_s: float = DEADLINE_S) -> None:
    """job.wait() with a deadline; force a state refresh each time (submitit's back-off grows)."""
    end = time.monotonic() + deadline_s
    while not job.done(force_check=True):
        if time.monotonic() > end:
            pytest.fail(f"job {job.job_id} not done after {deadline_s}s (state {job.state})")
        time.sleep(0.5)


def _wait_for(what: str, check: Callable[[], bool], deadline_s: float = DEADLINE_S) -> None:
    end = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > end:
            pytest.fail(f"timed out after {deadline_s}s waiting for {what}")
        time.sleep(0.2)


def _preempt(job: submitit.SlurmJob) -> None:
    """A preemption: SIGTERM, then the requeue signal once the job has taken the SIGTERM.
    submitit's job._interrupt() sends both back to back; once, on a loaded machine, the SIGTERM
    reached the job after the requeue signal's handler had started `scontrol requeue`, and
    killed it (the job failed: "scontrol requeue ... died with SIGTERM")."""
    scancel = ["scancel", job.job_id, "--signal"]
    subprocess.check_call([*scancel, "SIGTERM"])
    stderr = Path(str(job.paths.stderr))
    _wait_for("the job to take SIGTERM", lambda: stderr.exists()
              and "Bypassing signal SIGTERM" in stderr.read_text())  # fmt: skip
    subprocess.check_call([*scancel, SlurmJobEnvironment.USR_SIG])


def _final_state(job: submitit.Job, deadline_s: float = 60.0) -> str:
    """The job's state once SLURM has finished it, as submitit reads it (through sacct).

    job.done() turns True as soon as the result file exists, while SLURM may still say RUNNING
    or COMPLETING for a moment.
    """
    end = time.monotonic() + deadline_s
    while True:
        state = job.watcher.get_state(job.job_id, mode="force")
        if job.watcher.is_done(job.job_id, mode="cache") and state != "COMPLETING":
            return state
        if time.monotonic() > end:
            pytest.fail(f"job {job.job_id} still {state} after {deadline_s}s")
        time.sleep(0.3)


def add(a: int, b: int) -> int:
    return a + b


def stamp(release: str | None = None) -> tuple[float, float]:
    """Wait until the file `release` exists (if given); return (start, end) wall times."""
    start = time.time()
    while release is not None and not Path(release).exists():
        time.sleep(0.1)
    return start, time.time()


def fail() -> None:
    raise ValueError("boom from the job")


def sleep_long() -> None:
    time.sleep(300)


class Resumable(submitit.helpers.Checkpointable):
    """First run: mark that it started, then wait to be preempted. Resumed run: return the count.

    submitit's default checkpoint() pickles `self` (runs == 1) and requeues the job.
    """

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, marker: str) -> int:
        self.runs += 1
        if self.runs == 1:
            Path(marker).write_text("started")
            time.sleep(300)
        return self.runs


def test_cluster_is_up(slurm_cluster: SlurmCluster) -> None:
    assert "UP" in slurm_cluster.run("scontrol", "ping")
    assert slurm_cluster.run("sinfo", "-h", "-o", "%t").strip() in {"idle", "mix", "alloc"}


def test_submitit_returns_result(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job = _executor(tmp_path).submit(add, 2, 3)
    _wait(job)
    assert job.result() == 5
    assert _final_state(job) == "COMPLETED"


def test_afterok_dependency(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    executor = _executor(tmp_path)
    release = tmp_path / "release"
    parent = executor.submit(stamp, str(release))  # runs until the test has seen the child held
    after = {"dependency": f"afterok:{parent.job_id}"}
    executor.update_parameters(slurm_additional_parameters=after)
    child = executor.submit(stamp)
    _wait_for("parent RUNNING", lambda: slurm_cluster.state(parent.job_id) == "RUNNING")
    # The scheduler sets the reason on its next pass (sched_interval=2).
    _wait_for(
        "child held by its dependency",
        lambda: (
            slurm_cluster.run("squeue", "-h", "-j", child.job_id, "-o", "%T %r").strip()
            == "PENDING Dependency"
        ),
        deadline_s=120,  # the parent holds until released: no race with its end
    )
    assert slurm_cluster.state(parent.job_id) == "RUNNING"
    release.touch()
    _wait(child)
    (_, parent_end), (child_start, _) = parent.result(), child.result()
    assert child_start >= parent_end


def test_failing_job_raises_promptly(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job = _executor(tmp_path).submit(fail)
    _wait(job)
    assert _final_state(job) == "FAILED"
    # The error is read from the result file the job wrote before it failed: no wait for one
    # (submitit waits up to 15 s for a missing file, then raises UncompletedJobError instead).
    job._results_timeout_s = 0
    with pytest.raises(FailedJobError, match="boom from the job"):
        job.result()


def test_cancelled_job_is_seen_cancelled(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job = _executor(tmp_path).submit(sleep_long)
    _wait_for(f"job {job.job_id} RUNNING", lambda: slurm_cluster.state(job.job_id) == "RUNNING")
    job.cancel()
    _wait(job)
    assert _final_state(job).startswith("CANCELLED")
    job._results_timeout_s = 1  # no result file will come: do not wait the default 15 s for it
    with pytest.raises(UncompletedJobError):
        job.result()


def test_checkpointable_resumes_after_preemption(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    job = _executor(tmp_path, timeout_min=20).submit(Resumable(), str(marker))
    # submitit installs its signal handlers before it calls the function (process_job), so
    # once the marker exists the signal is handled.
    _wait_for("the first run to start", marker.exists)
    _preempt(job)  # SIGTERM then USR2: preemption -> checkpoint -> requeue
    _wait(job, deadline_s=180)
    assert job.result() == 2
    log = Path(str(job.paths.stderr)).read_text()
    assert "preempted" in log.lower()
