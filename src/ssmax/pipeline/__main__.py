"""`python -m ssmax.pipeline {run,plan,status} [--wait] [hydra overrides ...]` (--help: this text)

run     execute every node that is not cached (the executor group picks where), then report
plan    print the DAG: each node, its fingerprint and whether it is cached or would run; then
        what it costs (tokens, FLOPs, GPU-hours, wall time, disk: ssmax.pipeline.plan_cost)
status  each node's state on disk (and its SLURM job, after `run executor=slurm`)

One `run` per output folder at a time (ssmax.pipeline.run_lock): a second one says who holds it and
exits with status 3. --wait waits for that run to finish first, and under SLURM (= executor.wait=
true) for the jobs too (`run executor=slurm` submits and returns). A bad setting or input file:
one line, status 2; SSMAX_DEBUG=1 shows the traceback instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ssmax.config.compose import ConfigError, check_cli_choices, debug
from ssmax.data.hub import DataUnavailableError
from ssmax.host.devices import uses_cuda
from ssmax.pipeline.bundle.group import check_bundle
from ssmax.pipeline.executors import run_pipeline
from ssmax.pipeline.job import NodeJob
from ssmax.pipeline.local import Stopped
from ssmax.pipeline.mlflow_runs import abort_open_runs, close_dead_runs
from ssmax.pipeline.plan_cost import format_costs, over_timeout, plan_costs
from ssmax.pipeline.run import compose_pipeline, plan
from ssmax.pipeline.run_lock import BUSY, Busy, pipeline_lock
from ssmax.pipeline.slurm import book_path, print_status
from ssmax.pipeline.slurm.cluster_profile import check_cluster
from ssmax.pipeline.state import remove_partial_records
from ssmax.tracking.manifest import packages_sha
from ssmax.tracking.reach import check_tracking
from ssmax.tracking.spool import deliver_pending


def _print_plan(jobs: list[NodeJob]) -> None:
    for job in jobs:
        if job.done is not None:
            state = "cached"
        else:  # a folder without a done-marker: started, resumes from its checkpoint
            state = "partial" if Path(job.dir).exists() else "to-run"
        print(f"{state:<7} {job.name:<42} {job.fingerprint[:12]}  {job.dir}")
    todo = sum(job.done is None for job in jobs)
    print(f"{len(jobs)} nodes: {len(jobs) - todo} cached, {todo} to run")
    line = other_packages_line([job.done for job in jobs if job.done is not None])
    if line:
        print(line)


def other_packages_line(records: list[dict]) -> str:
    """One line when finished nodes ran with another package set than this environment's
    (their done records' packages_sha); "" when none did, or none recorded one. Their results
    are reused all the same: fingerprints hold the code and settings, not the packages."""
    recorded = [str(r["packages_sha"]) for r in records if r.get("packages_sha")]
    if not recorded:
        return ""

    current = packages_sha()
    other = sorted(sha for sha in recorded if sha != current)
    if not other:
        return ""
    shas = ", ".join(f"{sha} ({other.count(sha)})" for sha in sorted(set(other)))
    return (f"packages: {len(other)} cached nodes ran with another package set than this "
            f"environment's ({current}): packages_sha {shas}; reused all the same "
            "(fingerprints do not hold packages)")  # fmt: skip


def run(overrides: list[str], wait: bool = False) -> int:
    """Plan, then, holding the output folder's lock, run the plan with the configured executor
    (ssmax.pipeline.executors). Nodes another run finished while this one waited are cached:
    a node's done-marker is read when the executor reaches it."""
    base = compose_pipeline(overrides)
    check_bundle(base)  # before any work: where bundles run
    remote = check_tracking(base)  # before planning every node: seconds
    cfg, jobs = plan(overrides, base)
    costs = plan_costs(cfg, jobs)  # once: its FLOPs order the run too (run_pipeline)
    if cfg.executor.kind == "local":  # a node past executor.timeout_min is killed there
        too_long = over_timeout(cfg, costs)
        if too_long:
            raise ConfigError(too_long)
    if remote and Path(cfg.paths.output_dir).is_dir():  # what earlier runs left for the server
        deliver_pending(cfg.paths.output_dir)
    if cfg.executor.kind == "slurm":  # the jobs run on the cluster's nodes, GPUs or not
        check_cluster()
    else:
        uses_cuda(str(cfg.trainer.accelerator))  # a GPU asked for and not here: one line
    log = lambda line: print(line, flush=True)  # noqa: E731
    command = " ".join(["python -m ssmax.pipeline run", *overrides])
    with pipeline_lock(cfg.paths.output_dir, wait, log, command):
        close_dead_runs(cfg, log)  # with the folder held: runs of a crashed predecessor end KILLED
        remove_partial_records(cfg.paths.output_dir)  # and what it was writing when it died
        try:
            status = run_pipeline(cfg, jobs, overrides, log, costs)
            if remote:  # what training nodes kept while the server was away, if it is back
                deliver_pending(cfg.paths.output_dir)
            return status
        except BaseException as err:  # the run ends FAILED, KILLED when stopped; never RUNNING
            stopped = isinstance(err, KeyboardInterrupt | Stopped)  # Ctrl-C, SIGTERM, SIGHUP
            abort_open_runs("KILLED" if stopped else "FAILED")
            raise
        finally:
            abort_open_runs("FINISHED")  # none left open after a normal end: close() ran


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help", "help") for a in argv[:1]) or "--help" in argv:
        print(__doc__.strip())  # what each command does; the settings: conf/, README.md
        return 0
    command, overrides = (argv[0], argv[1:]) if argv and "=" not in argv[0] else ("run", argv)
    wait = "--wait" in overrides
    if wait:
        overrides = [o for o in overrides if o != "--wait"] + ["executor.wait=true"]
    try:
        if command not in ("run", "plan", "status"):
            raise ConfigError(f"command {command!r} is unknown; allowed: run, plan, status")
        unknown = [o for o in overrides if o.startswith("-")]
        if unknown:
            raise ConfigError(f"option {unknown[0]!r} is unknown; allowed: --wait, --help")
        check_cli_choices(overrides)  # a key the config lacks: when composing it (plan)
        if command == "run":
            return run(overrides, wait)

        cfg, jobs = plan(overrides)
        check_bundle(cfg)
        if command == "status" and book_path(cfg).exists():  # nodes were submitted to SLURM
            return print_status(cfg, jobs)
        _print_plan(jobs)
        if command == "plan":
            costs = plan_costs(cfg, jobs)
            print(format_costs(cfg, costs))
            too_long = over_timeout(cfg, costs)  # `run` refuses it; a plan shows what it costs
            if too_long:
                print(f"warning: {too_long}")
        return 0
    except Busy as err:
        print(f"busy: {err}", file=sys.stderr)
        return BUSY
    except (ConfigError, ValueError, DataUnavailableError) as err:
        if debug():
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
