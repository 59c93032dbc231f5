"""Run a registered run's seeds one at a time, at the registered commit, and record each.

    python -m ssmax.registration.run cpu [--workdir DIR] [--max-seeds K] [--registration F]
    python -m ssmax.registration.run cpu --design --registration F [--workdir DIR]
    python -m ssmax.registration.run gpu [--workdir DIR] [--commit SHA] [--workers N] ...

For each seed of the run (verdicts.registered) without a record in docs/results/<name>/<run>/:
the paper pipeline for that seed alone, in a checkout of the registered commit (DIR/code, a
clone of this repository made once, its .venv by its own `make setup`; or --python, an
interpreter whose packages run it, the checkout's src/ first on its path), into DIR/outputs (the
cache: a seed stopped midway resumes where it stopped); then the seed's record, written
atomically: its values (the report node's results.json), every node's fingerprint, commit, CPU
and wall time. A seed that fails twice gets a failure record instead, and the next spare takes
its place (the registration's conduct). Seeds run in the registered order; the run ends when
every seed has a record, or after --max-seeds seeds. Nothing here computes a verdict.
A registration with design seeds (design_seeds: the arms') runs them first, the same way, with
--design: records in docs/results/<name>/design/, no spare for a seed that fails twice (its
failure record is what the design reports); its verdict seeds wait until each design seed has
a record. DIR: ~/ssmax-confirm for the confirmatory registration, else ~/ssmax-<its page>
(~/ssmax-arms), one cache for its design and verdict seeds.
The gpu run takes its own path, every seed at once in this checkout: ssmax.registration.gpu.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from ssmax.files.atomic import atomic_write_json
from ssmax.host.cli import Parser
from ssmax.registration.gpu import GPU_WORKDIR, run_gpu
from ssmax.registration.records import nodes_of, pipeline_argv, report_over
from ssmax.verdicts.published_file import run_file
from ssmax.verdicts.registered import (
    DESIGN,
    REGISTRATION,
    ROOT,
    Registration,
    cli,
    load,
    planned,
    record_path,
    to_run,
)

WORKDIR = Path.home() / "ssmax-confirm"  # outside the checkout: a new work tree keeps it
ATTEMPTS = 2  # a technical failure is run again once (the registration's conduct)


def workdir_of(reg: Registration) -> Path:
    """The run's default DIR: WORKDIR for the confirmatory registration, else ~/ssmax-<page>
    (the arms': ~/ssmax-arms, as its registration's command says)."""
    if reg.path.resolve() == REGISTRATION.resolve():
        return WORKDIR
    return Path.home() / f"ssmax-{reg.page.stem}"


def checkout(reg: Registration, workdir: Path, python: str | None) -> Path:
    """DIR/code at the registered commit (with its own .venv unless python is given); refuses
    a checkout at any other commit or with changes."""
    code = workdir / "code"
    if not code.exists():
        workdir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "clone", "-q", str(ROOT), str(code)], check=True)
        subprocess.run(["git", "-C", str(code), "checkout", "-q", "--detach", reg.code_commit],
                       check=True)  # fmt: skip
    head = subprocess.run(["git", "-C", str(code), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    changed = subprocess.run(["git", "-C", str(code), "status", "--porcelain", "-uno"],
                             check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    if head != reg.code_commit or changed:
        raise SystemExit(f"{code} is at {head}{' with changes' if changed else ''}, not the "
                         f"registered {reg.code_commit}")  # fmt: skip
    if python is None:
        subprocess.run(["make", "-C", str(code), "setup"], check=True)
    return code


def command(reg: Registration, seed: int, outputs: Path, python: str) -> list[str]:
    return pipeline_argv(reg, [seed], outputs, python)


def report_results(outputs: Path, seed: int) -> Path:
    """results.json of the newest finished report node over exactly this seed."""
    found = report_over(outputs, [seed])
    if found is None:
        raise SystemExit(f"no finished report node for seed {seed} under {outputs}")
    return found


def record(reg: Registration, run: str, seed: int, outputs: Path, wall_s: float) -> dict:
    about = (f"Seed {seed} of the registered run '{run}' of {reg.name} (docs/registration/), "
             "recorded as it finished, before any verdict of the run was computed.")  # fmt: skip
    if run == DESIGN:
        about = (f"Design seed {seed} of {reg.name} (docs/registration/), run before its verdict "
                 "seeds at the registered commit and recorded as it finished; it decides "
                 "nothing.")  # fmt: skip
    content = run_file(report_results(outputs, seed), [seed], about)
    return {**content, "registration": reg.name, "registered_run": run, "seed": seed,
            "wall_s": round(wall_s, 1), "nodes": nodes_of(outputs, seed)}  # fmt: skip


def run_seed(
    reg: Registration, run: str, seed: int, code: Path, workdir: Path, python: str | None
) -> bool:
    """One seed, tried up to ATTEMPTS times; its record (or failure record) written."""
    env = dict(os.environ)
    if python is not None:  # the checkout's code, whatever the interpreter has installed
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code / "src"),
                                                          env.get("PYTHONPATH")]))  # fmt: skip
    argv = command(reg, seed, workdir / "outputs", python or str(code / ".venv" / "bin" / "python"))
    outputs, logs = workdir / "outputs", workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, ATTEMPTS + 1):
        log = logs / f"{'design-' * (run == DESIGN)}seed{seed}.attempt{attempt}.log"
        start = time.monotonic()
        with log.open("w") as out:
            done = subprocess.run(argv, cwd=code, env=env, stdout=out,
                                  stderr=subprocess.STDOUT).returncode == 0  # fmt: skip
        if done:
            rec = record(reg, run, seed, outputs, time.monotonic() - start)
            atomic_write_json(record_path(reg, run, seed), rec, indent=1)
            return True
        print(f"seed {seed}: attempt {attempt} failed (log: {log})", flush=True)
    tail = log.read_text().splitlines()[-20:]
    atomic_write_json(record_path(reg, run, seed, failed=True),
                      {"registration": reg.name, "registered_run": run, "seed": seed,
                       "attempts": ATTEMPTS, "log_tail": tail}, indent=1)  # fmt: skip
    return False


def main(argv: list[str] | None = None) -> int:
    parser = Parser("ssmax.registration.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="the registered run to make: cpu (gpu: issue 59's path)")
    parser.add_argument("--registration", type=Path, default=REGISTRATION)  # fmt: skip
    parser.add_argument("--workdir", type=Path, help=f"the commit's checkout and cache "
                        f"({WORKDIR}; another registration's: ~/ssmax-<its page>, as "
                        f"~/ssmax-arms; gpu: {GPU_WORKDIR})")  # fmt: skip
    parser.add_argument("--python", help="an interpreter to run the checkout with (default: "
                        "the checkout's own .venv, made by its make setup)")  # fmt: skip
    parser.add_argument("--max-seeds", type=int, default=0, help="stop after this many (0: all)")
    parser.add_argument("--design", action="store_true", help="the design seeds (cpu only; "
                        "records in docs/results/<name>/design/), run first")  # fmt: skip
    gpu_args = parser.add_argument_group("the gpu run (ssmax.registration.gpu)")
    gpu_args.add_argument("--commit", help="the commit this checkout is (default: its git HEAD)")
    gpu_args.add_argument("--workers", type=int, default=16, help="nodes side by side (16)")
    gpu_args.add_argument("--timeout-s", type=float, default=None, help="stop the pipeline then")
    gpu_args.add_argument("--accelerator", default="gpu", choices=("gpu", "cpu"),
                          help=argparse.SUPPRESS)  # cpu: the tests' (no GPU there)  # fmt: skip
    args = parser.parse_args(argv)
    reg = load(args.registration)
    if args.design and args.run != "cpu":
        raise SystemExit("--design: the design seeds run on the cpu, at the registered commit")
    if args.run not in reg.runs:
        raise SystemExit(f"no run {args.run!r} in {reg.name} (registered: {', '.join(reg.runs)})")
    if args.design and not reg.design_seeds:
        raise SystemExit(f"{reg.name} registers no design seeds")
    if not args.design and (left := to_run(reg, DESIGN)):
        raise SystemExit(f"{reg.name}: its design seeds run first ({', '.join(map(str, left))} "
                         f"without a record): python -m ssmax.registration.run cpu --design "
                         f"--registration {args.registration}")  # fmt: skip
    if args.run == "gpu":
        return run_gpu(reg, args.workdir or GPU_WORKDIR, args.python or sys.executable, args.commit,
                       args.workers, args.timeout_s, args.accelerator)  # fmt: skip
    if args.run != "cpu":
        raise SystemExit(f"run {args.run!r} is made by its own path, not this one")
    if args.max_seeds < 0:
        raise SystemExit(f"--max-seeds must be >= 0 (got {args.max_seeds})")
    args.workdir = args.workdir or workdir_of(reg)
    run = DESIGN if args.design else args.run  # the records' folder
    code, made = None, 0
    while (todo := to_run(reg, run)) and not (args.max_seeds and made >= args.max_seeds):
        # made at the first seed: a finished run needs none (its clone and make setup: minutes)
        code = code or checkout(reg, args.workdir, args.python)
        seed = todo[0]
        print(f"seed {seed}: running ({len(todo)} of {len(planned(reg, run))} to go)",
              flush=True)  # fmt: skip
        ok = run_seed(reg, run, seed, code, args.workdir, args.python)
        failed = "failed twice; " + ("recorded as failed" if run == DESIGN else
                                     "a spare takes its place")  # fmt: skip
        print(f"seed {seed}: {'recorded' if ok else failed}", flush=True)
        made += 1
    left = to_run(reg, run)
    print(f"{reg.name} {run}: {len(planned(reg, run)) - len(left)} seeds recorded, "
          f"{len(left)} to go")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(cli(main))
