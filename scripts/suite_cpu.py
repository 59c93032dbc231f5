"""Where the test suite's CPU goes: every Python process it starts, by test module.

The suite is CPU-bound on 2 cores (its wall time is about its CPU time / 2), and most of its
CPU is spent in the processes it starts (training, pipelines, SLURM jobs, MLflow servers), which
pytest's --durations does not see. This runs pytest (the arguments given, e.g. `-n 2`) with a
hook in this Python's site-packages (a .pth file, removed afterwards) that, in every process of
this interpreter started under it, records at exit its own CPU time (user + system), argv and the
test that started it (PYTEST_CURRENT_TEST). Not recorded: processes that leave by os._exit (the
local executor's forked workers) or are killed by a signal they cannot catch.

Usage: python scripts/suite_cpu.py [pytest arguments]; prints the table after pytest's output.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ENV = "SSMAX_SUITE_CPU"  # the log file; the hook does nothing without it
HOOK = f"""
import atexit, json, os, resource, sys

def _record(path=os.environ.get({ENV!r})):
    use = resource.getrusage(resource.RUSAGE_SELF)
    row = {{"cpu": use.ru_utime + use.ru_stime, "argv": sys.argv[:3],
           "test": os.environ.get("PYTEST_CURRENT_TEST", "")}}
    with open(path, "a") as log:
        log.write(json.dumps(row) + "\\n")

if os.environ.get({ENV!r}):
    atexit.register(_record)
"""


def table(rows: list[dict]) -> list[str]:
    """CPU seconds and processes by test module; the pytest processes themselves apart."""
    by: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for row in rows:
        where = row["test"].split("::")[0] or "pytest and its workers (in-process tests)"
        by[where][0] += 1
        by[where][1] += row["cpu"]
    lines = [f"{'CPU s':>8} {'procs':>5}  module"]
    for where, (n, cpu) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"{cpu:8.1f} {n:5d}  {where}")
    total = sum(cpu for _, cpu in by.values())
    return [*lines, f"{total:8.1f} {len(rows):5d}  in all"]


def main(args: list[str]) -> int:
    site = Path(sysconfig.get_paths()["purelib"])
    hook, pth = site / "ssmax_suite_cpu_hook.py", site / "ssmax_suite_cpu.pth"
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "cpu.jsonl"
        hook.write_text(HOOK)
        pth.write_text("import ssmax_suite_cpu_hook\n")
        try:
            env = os.environ | {ENV: str(log)}
            code = subprocess.call([sys.executable, "-m", "pytest", *args], env=env)
        finally:
            pth.unlink(missing_ok=True)
            hook.unlink(missing_ok=True)
        rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    print("\n".join(table(rows)))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
