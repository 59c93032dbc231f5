"""`make mutation-check` seeds its bugs by quoting source lines; a quoted line that an edit moved
breaks it (scripts/mutation_check.py --list checks every quote). The check itself takes ~14 min
and stays out of `make test`; this keeps its quotes in step with the source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "mutation_check.py"


def test_every_seeded_bug_quotes_its_source_once() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") >= 60  # one line a bug
