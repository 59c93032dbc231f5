"""The local executor: up to executor.workers nodes at once, each in a worker process forked
from a server that imported the stages' code once (multiprocessing's forkserver), with the
code as planned (executor.snapshot); a node's output goes to its log file. Inline nodes run in
this process (ssmax.pipeline.inprocess).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ssmax.host.environ import patched_environ
from ssmax.pipeline.bundle.group import BundleJob, blocked_nodes, settle, time_limit
from ssmax.pipeline.inprocess import EVALS, FINISHED, Job, Log, adopt, execute, run_inprocess
from ssmax.pipeline.mlflow_runs import ParentRun, close_dead_runs
from ssmax.pipeline.progress import Progress
from ssmax.pipeline.snapshot import snapshot
from ssmax.pipeline.stage_code import stage_code
from ssmax.stages.spec import stage_spec
from ssmax.tracking.manifest import COMMIT_ENV, git_commit
from ssmax.tracking.spool import KEPT, end_open_spools

# what a worker runs for a bundle beyond its stage's code (preloaded by the forkserver)
BUNDLE_MODULES = ["ssmax.pipeline.bundle.train", "ssmax.lit.bundle.run"]


def run_local(jobs: list[Job], cfg: DictConfig, log: Log, parent: ParentRun) -> dict[str, str]:
    """Up to executor.workers nodes at once, each in its own process; a node starts as soon as
    its inputs are finished. Workers fork from a server that has imported what the stages run
    once (multiprocessing's forkserver; preload): a fresh interpreter per node costs seconds
    (measured: docs/pipeline.md, "Measured").
    Inline stages (no compute) run in this process. A node's output goes to its log file.
    With executor.snapshot the nodes import the code as planned (_serve, _imports_from)."""
    context = multiprocessing.get_context("forkserver")
    todo = {job.module for job in jobs if job.done is None and not job.inline}
    frozen = snapshot(cfg.paths.output_dir) if todo and cfg.executor.snapshot else None
    # an eval bundle needs nothing more: bundle.evals comes with this module (the workers' entry)
    training = any(isinstance(j, BundleJob) and stage_spec(j.module).bundle != EVALS for j in jobs)
    extra = BUNDLE_MODULES if training else []
    with _imports_from(frozen):
        if todo:  # the server imports while this process opens the MLflow run, orders nodes
            _serve(context, preload(todo) + extra, frozen)
        return _schedule(jobs, cfg, log, parent, context)


def node_threads(workers: int) -> int:
    """A local node's torch threads: its share of the cores this process may run on, and at
    most OMP_NUM_THREADS where the environment sets it (the caller's share: a test suite's
    worker, a batch job's). More threads than free cores spin and wait: on 2 busy cores a
    smoke pretraining took 1.6x the CPU with 2 threads as with 1 (docs/history.md)."""
    share = max(1, len(os.sched_getaffinity(0)) // workers)
    limit = os.environ.get("OMP_NUM_THREADS", "")
    return min(share, int(limit)) if limit.isdigit() and int(limit) > 0 else share


def first_seed(job: Job) -> int:
    """A node's seed, a bundle's lowest; -1 for a node of no seed (the report: it waits on
    all of them anyway)."""
    seeds = getattr(job, "seeds", None) or [job.seed]
    return min(-1 if s is None else int(s) for s in seeds)


def _schedule(
    jobs: list[Job], cfg: DictConfig, log: Log, parent: ParentRun, context: Any
) -> dict[str, str]:
    adopt(jobs, parent)
    workers = int(cfg.executor.workers)
    timeout_s = 60 * float(cfg.executor.timeout_min)
    threads = node_threads(workers)
    logs = Path(cfg.paths.output_dir) / "pipeline" / "logs"
    states = {job.name: "cached" for job in jobs if job.done is not None}
    pending = [job for job in jobs if job.name not in states]
    # Longest remaining path first: the long pretrainings start before short evals that wait
    # on nothing (in DAG order, (c) and (d) would pretrain only after (a)'s and (b)'s evals).
    # executor.order=seed: the lowest seed first, so that a run stopped midway (a GPU loan's
    # end) has as many seeds as it can with every node done.
    by_seed = cfg.executor.order == "seed"
    pending.sort(key=lambda job: (first_seed(job) if by_seed else 0, -job.remaining))
    progress = Progress.of(pending)
    running: dict[str, _Worker] = {}
    before = _stops_as_exit()  # SIGTERM/SIGHUP end this loop through its finally: no orphans
    try:
        while pending or running:
            for job in list(pending):
                cut, whole = blocked_nodes(job, states)  # a bundle goes on without those
                states |= cut
                ready = all(states.get(i) in FINISHED for i in job.input_dirs)
                if whole:
                    pending.remove(job)
                elif ready and job.inline:
                    pending.remove(job)  # no worker to start
                    states |= run_inprocess([job], cfg, log, parent, progress)
                elif ready and len(running) < workers:
                    job.threads = threads
                    running[job.name] = _Worker(context, job, logs)
                    pending.remove(job)
                    log(f"run     {job.name} (pid {running[job.name].process.pid})")
            multiprocessing.connection.wait([w.process.sentinel for w in running.values()], 0.2)
            for name, worker in list(running.items()):
                state, detail = worker.poll(timeout_s)
                if state is None:
                    continue
                del running[name]
                states |= settle(worker.job, state)
                if state == "done":
                    log(f"done    {name} ({detail['wall_s']:.1f} s; {progress.after(states)})")
                else:
                    log(
                        f"FAILED  {name}: {detail} (log: {worker.log_path}; "
                        f"{progress.after(states)})"
                    )
                for line in worker.kept_lines():
                    log(f"kept    {name}: {line}")
    finally:  # interrupted: no orphan keeps training, and none of their runs stays RUNNING
        for worker in running.values():
            worker.process.kill()
        for worker in running.values():
            worker.process.join(timeout=60)
        if running:
            try:
                close_dead_runs(cfg, log)  # the killed workers'
            except Exception as err:  # noqa: BLE001 - the stop goes on; the next run closes them
                log(f"the killed workers' runs stay open until the next run: {err}")
        for sig, handler in before.items():
            signal.signal(sig, handler)
    return states


_SERVED: dict[str, str | None] = {"code": None}  # what the running forkserver imports


@contextmanager
def _imports_from(frozen: Path | None) -> Iterator[None]:
    """This process's imports from now on, and its workers' (they take its sys.path), find the
    snapshot's modules first: sys.path leads to the copy's src/ (for the namespace package
    ssmax), and every ssmax package already imported searches the copy's folder before its
    own (its __path__), so a late import (an inline node's here; in a worker, one its
    forkserver did not preload) comes from the copy. Modules already imported stay as they
    are: they were read from the checkout as it was when the run started. Put back after."""
    if frozen is None:
        yield
        return
    entry = str(frozen / "src")
    sys.path.insert(0, entry)
    led: list[tuple[list[str], str]] = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__path__", None)
        copy = frozen / "src" / name.replace(".", "/")
        if name.startswith("ssmax.") and isinstance(path, list) and copy.is_dir():
            path.insert(0, str(copy))
            led.append((path, str(copy)))
    try:
        yield
    finally:
        for path, copy in led:
            if copy in path:
                path.remove(copy)
        if entry in sys.path:
            sys.path.remove(entry)


def _serve(context: Any, modules: list[str], frozen: Path | None) -> None:
    """The forkserver the workers fork from, importing `modules` from `frozen`'s src/ (the
    code as planned, ssmax.pipeline.snapshot: an edit of the checkout while the run goes
    reaches no worker, not even a module one imports late) or, without it, from the checkout.
    One per process, kept across runs of the same snapshot; restarted for another: other code,
    or the same code snapshotted in another output folder (the server's path leads to its
    folder, which may be gone: a run's folder deleted, then another run in this process)."""
    # the snapshot's folder (named by its content digest) and the commit the records name (the
    # copy is no repository: manifest.git_commit reads it from COMMIT_ENV)
    code = f"{frozen}@{git_commit()}" if frozen else None
    server = multiprocessing.forkserver._forkserver
    if server._forkserver_pid is not None and _SERVED["code"] != code:
        server._stop()  # it serves other code (a private API of CPython, 3.11 to 3.13)
    context.set_forkserver_preload([*modules, __name__])  # __name__: the workers' entry, _work
    changes = {}
    if frozen:  # the server starts with it, so its imports, late ones too, find the copy first
        path = os.pathsep.join(filter(None, [str(frozen / "src"), os.environ.get("PYTHONPATH")]))
        changes = {"PYTHONPATH": path, COMMIT_ENV: git_commit()}
    with patched_environ(changes):
        multiprocessing.forkserver.ensure_running()
    _SERVED["code"] = code


class Stopped(SystemExit):
    """SIGTERM or SIGHUP, as Ctrl-C is KeyboardInterrupt: the runs it ends are KILLED."""


def _stops_as_exit() -> dict[int, Any]:
    """SIGTERM and SIGHUP raise Stopped(128 + signal) here, as Ctrl-C raises
    KeyboardInterrupt: their default ends the process at once, without its finally blocks, and
    the workers (forked by the forkserver, not by this process) would train on. The handlers
    that were in place, to put back."""

    def stop(signum: int, frame: object) -> None:
        raise Stopped(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}


def preload(stages: set[str]) -> list[str]:
    """What a worker would import to run a node of these stage modules: the runner, MLflow and
    its sqlite store (seconds to import: every node opens its MLflow run), and every module the
    stages run (their code, function-level imports included: Lightning comes with training's,
    not with the stage module itself)."""
    code = {f for stage in stages for f in stage_code(stage)}
    names = {"ssmax." + f.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
             for f in code}  # fmt: skip
    mlflow = ["mlflow", "mlflow.store.tracking.sqlalchemy_store"]
    return ["ssmax.pipeline.run", "ssmax.tracking", *mlflow, *sorted(names)]


class _Worker:
    """One node in a forked process; its result comes back over a pipe."""

    def __init__(self, context: Any, job: Job, logs: Path) -> None:
        self.job = job
        logs.mkdir(parents=True, exist_ok=True)
        self.log_path = logs / f"{job.name.replace('/', '.')}.log"
        self.conn, child = context.Pipe(duplex=False)
        login = tracking_login()  # in memory only: never in the job, its log or a file
        self.process = context.Process(target=_work, args=(job, str(self.log_path), child, login))
        self.start = time.monotonic()
        self.process.start()
        child.close()

    def kept_lines(self) -> list[str]:
        """The node's line on MLflow records kept for a server that was away, from its log."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return [line for line in text.splitlines() if KEPT in line]

    def poll(self, timeout_s: float) -> tuple[str | None, Any]:
        """(None, None) while running; else (done, record) or (failed, reason)."""
        if self.conn.poll():
            try:
                state, detail = self.conn.recv()
            except EOFError:
                state, detail = "failed", "the worker ended without a result"
            self.process.join()
            return state, detail
        if not self.process.is_alive():
            return "failed", f"the worker exited with code {self.process.exitcode}"
        limit = time_limit(self.job, timeout_s)  # a bundle: its seeds' limits together
        if time.monotonic() - self.start > limit:
            self.process.kill()
            self.process.join()
            said = f"executor.timeout_min={timeout_s / 60:g}"
            if isinstance(self.job, BundleJob):
                said += f" x {len(self.job.members)} seeds"
            return "failed", f"timed out after {said}"
        return None, None


LOGIN_VARIABLES = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")


def tracking_login() -> dict[str, str]:
    """The tracking server's login in this process's environment now (ssmax.tracking.auth)."""
    return {name: os.environ[name] for name in LOGIN_VARIABLES if name in os.environ}


def _work(job: Job, log_path: str, conn: Any, login: dict[str, str]) -> None:
    """The worker: output to the node's log file, the record (or the error's last line) back.
    It logs in as the pipeline does now: the forkserver it forks from keeps the environment
    it started with, which may be older (a process that ran a pipeline, then logged in)."""
    for name in LOGIN_VARIABLES:
        os.environ.pop(name, None)
    os.environ.update(login)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    try:
        record = execute(job)
    except BaseException as err:  # noqa: BLE001 - reported to the parent, which decides
        traceback.print_exc()
        conn.send(("failed", (str(err).strip().splitlines() or [type(err).__name__])[-1]))
    else:
        conn.send(("done", record))
    finally:
        end_open_spools()  # its line on what stays for later: the fork's exit skips atexit
        sys.stdout.flush()
        sys.stderr.flush()
        conn.close()
