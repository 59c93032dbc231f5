"""`python -m ssmax.pipeline {run,plan,status} [hydra overrides ...]`

run     execute every node that is not cached (the executor group picks where), then report
plan    print the DAG: each node, its fingerprint and whether it is cached or would run; then
        what it costs (tokens, FLOPs, GPU-hours, wall time, disk: ssmax.pipeline.cost)
status  each node's state on disk (and its SLURM job, after `run executor=slurm`)

`run executor=slurm` submits and returns; add --wait (= executor.wait=true) to wait for the jobs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ssmax.config import ConfigError, check_cli_choices, check_override_keys


def _print_plan(jobs: list) -> None:  # noqa: ANN001 - NodeJob, imported lazily
    for job in jobs:
        if job.done is not None:
            state = "cached"
        else:  # a folder without a done-marker: started, resumes from its checkpoint
            state = "partial" if Path(job.dir).exists() else "to-run"
        print(f"{state:<7} {job.name:<42} {job.fingerprint[:12]}  {job.dir}")
    todo = sum(job.done is None for job in jobs)
    print(f"{len(jobs)} nodes: {len(jobs) - todo} cached, {todo} to run")


def run(overrides: list[str]) -> int:
    """Plan, then run the plan with the configured executor (ssmax.pipeline.executors)."""
    from ssmax.pipeline.executors import run_pipeline
    from ssmax.pipeline.run import plan

    cfg, jobs = plan(overrides)
    return run_pipeline(cfg, jobs, overrides, lambda line: print(line, flush=True))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command, overrides = (argv[0], argv[1:]) if argv and "=" not in argv[0] else ("run", argv)
    if "--wait" in overrides:
        overrides = [o for o in overrides if o != "--wait"] + ["executor.wait=true"]
    try:
        if command not in ("run", "plan", "status"):
            raise ConfigError(f"command {command!r} is unknown; allowed: run, plan, status")
        check_cli_choices(overrides)
        check_override_keys(overrides, config_name="pipeline")
        if command == "run":
            return run(overrides)
        from ssmax.pipeline.run import plan
        from ssmax.pipeline.slurm import book_path, print_status

        cfg, jobs = plan(overrides)
        if command == "status" and book_path(cfg).exists():  # nodes were submitted to SLURM
            return print_status(cfg, jobs)
        _print_plan(jobs)
        if command == "plan":
            from ssmax.pipeline.cost import format_costs, plan_costs

            print(format_costs(cfg, plan_costs(cfg, jobs)))
        return 0
    except (ConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
