"""Write tests/durations.json, the seconds each test module took, from the log of a suite run
with every duration shown (`make test PYTEST_ARGS=--durations=0 > LOG`). tests/conftest.py
starts the longest modules first, so that no worker is left with a long one at the end.

    python scripts/test_durations.py LOG
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

from ssmax.files.atomic import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = ROOT / "tests" / "durations.json"
# a line of pytest's durations table: "12.34s call     tests/test_x.py::test_y[...]"
LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s (?:call|setup|teardown)\s+tests/([\w/]+\.py)::")


def module_seconds(log: str) -> dict[str, float]:
    """Each module's (file name's) summed setup, call and teardown seconds, longest first."""
    total: Counter[str] = Counter()
    for line in log.splitlines():
        if m := LINE.match(line):
            total[Path(m[2]).name] += float(m[1])
    return {name: round(s, 1) for name, s in total.most_common()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    args = parser.parse_args(argv)
    if not args.log.is_file():
        raise SystemExit(f"no such file: {args.log}")
    seconds = module_seconds(args.log.read_text(errors="replace"))
    if not seconds:
        raise SystemExit(f"{args.log} has no durations (run the suite with --durations=0)")
    atomic_write_text(DURATIONS, json.dumps(seconds, indent=1) + "\n")
    print(f"wrote {DURATIONS.relative_to(ROOT)}: {len(seconds)} modules, "
          f"{sum(seconds.values()):.0f} s in all")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
