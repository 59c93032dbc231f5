"""The Makefile's folder settings: OUTPUT_DIR (and TRACKING_URI) reach every target that writes
or reads a run's folder, so that `make reproduce-all OUTPUT_DIR=X` then `make report
OUTPUT_DIR=X` name one folder (reproduce-all ignored both until 2026-11-29: the run went to
outputs/, the report looked in X)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import make_command

ROOT = Path(__file__).resolve().parents[1]
WRITERS = ("reproduce-all", "plan", "status", "export", "train", "train-all", "train-all-slurm")
READERS = ("report", "mlflow-ui", "sync")
# every target whose recipe runs one of the project's commands (setup, lint, the cluster's and
# the suite's targets run tools with their own settings: PYTEST_ARGS, SLURM_DIR, ...)
COMMANDS = WRITERS + READERS + ("confirm", "confirm-page", "equivalence", "results-page",
                                "mlflow-server", "mutation-check")  # fmt: skip


def made(target: str, *settings: str) -> list[str]:
    """The command `make TARGET` runs in this checkout, as argv."""
    return make_command(ROOT, target, *settings)


@pytest.mark.parametrize("target", WRITERS + READERS)
def test_output_dir_reaches_every_target_of_a_run_folder(target: str, tmp_path: Path) -> None:
    argv = made(target, f"OUTPUT_DIR={tmp_path}", "TRACKING_URI=http://127.0.0.1:5999")
    if target in WRITERS:
        assert f"paths.output_dir={tmp_path}" in argv, argv
        assert "tracking.tracking_uri=http://127.0.0.1:5999" in argv, argv
    else:
        assert argv[argv.index("--output-dir") + 1] == str(tmp_path), argv


def test_args_still_override_the_folder(tmp_path: Path) -> None:
    """ARGS come last: Hydra takes the last value of a key."""
    argv = made("reproduce-all", f"ARGS=paths.output_dir={tmp_path}")
    assert argv.index(f"paths.output_dir={tmp_path}") > argv.index("paths.output_dir=outputs")


@pytest.mark.parametrize("target", COMMANDS)
def test_args_reach_every_command(target: str) -> None:
    """`make equivalence ARGS=--commit=C` checked HEAD until 2026-11-29: seven targets dropped
    ARGS without a word."""
    assert made(target, "ARGS=--given")[-1] == "--given"


def test_the_plan_of_another_folder_lies_in_it(tmp_path: Path) -> None:
    """Run for real: the nodes `make plan OUTPUT_DIR=X` lists are folders under X."""
    argv = made("plan", "PRESET=smoke", f"OUTPUT_DIR={tmp_path}")
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    dirs = [line.split()[-1] for line in out.stdout.splitlines() if line.startswith("to-run")]
    assert dirs and all(d.startswith(str(tmp_path)) for d in dirs), out.stdout[-2000:]


def test_a_setting_the_makefile_does_not_read_is_refused_in_one_line() -> None:
    """make ignores VAR=value it never reads: `make reproduce-all VARIANTS=b_ssmax` ran every
    variant (2026-11-29). Each one given on the command line must be a setting of the file."""
    said = subprocess.run(["make", "-s", "-n", "-C", str(ROOT), "reproduce-all", "VARIANTS=b",
                           "PRESET=smoke", "ARGS=x"], capture_output=True, text=True)  # fmt: skip
    assert said.returncode == 2 and said.stdout == "", said.stdout
    (line,) = said.stderr.splitlines()
    assert "*** VARIANTS: not a setting of this Makefile" in line, line
    assert " PRESET " in line and "ARGS=" in line and "PRESET:" not in line, line


@pytest.mark.parametrize("seeds", ["1,,2", "0 1", "-1", "3-5"])
def test_seeds_that_are_not_a_list_are_refused_in_one_line(seeds: str) -> None:
    """SEEDS=1,,2 reached Hydra as pipeline.seeds=[1,,2], whose parser's error told to quote."""
    said = subprocess.run(["make", "-s", "-n", "-C", str(ROOT), "plan", f"SEEDS={seeds}"],
                          capture_output=True, text=True)  # fmt: skip
    assert said.returncode == 2 and said.stdout == "", said.stdout
    (line,) = said.stderr.splitlines()
    assert f"SEEDS={seeds} is not a list of seeds; allowed: integers >= 0" in line, line
