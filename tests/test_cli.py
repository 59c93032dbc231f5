"""The entries' command lines: a mistake argparse finds is the project's one line, exit 2
(ssmax.host.cli.Parser), in every `python -m` entry that parses with argparse."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "ssmax"

# module, arguments (the required ones given, then the mistake), what the line says
MISTAKES = [
    ("ssmax.tracking.ui", ["--port", "abc"], "--port: 'abc' is not a port; allowed: 1-65535"),
    ("ssmax.tracking.ui", ["--bogus"],
     "unrecognized arguments: --bogus; allowed: --output-dir, --port, --host, --help"),
    ("ssmax.tracking.server", ["--port", "99999"], "--port: '99999' is not a port"),
    ("ssmax.tracking.sync", ["--tracking-uri", "http://h:1", "--bogus"], "--bogus; allowed: "),
    ("ssmax.report.__main__", ["--output-dir", "x", "--bogus"], "--bogus; allowed: --output-dir"),
    ("ssmax.report.published.__main__", ["--bogus"],
     "unrecognized arguments: --bogus; allowed: --check"),
    ("ssmax.export.__main__", ["--node", "sft/b_ssmax/seed0", "--rope-factor", "big"],
     "argument --rope-factor: invalid float value: 'big'"),
    ("ssmax.registration.run", ["cpu", "--max-seeds", "two"], "invalid int value: 'two'"),
    ("ssmax.registration.judge", ["--bogus"], "--bogus; allowed: --check, --registration"),
    ("ssmax.registration.equivalence", ["--bogus"], "--bogus; allowed: --registration, --commit"),
]  # fmt: skip


@pytest.mark.parametrize(("module", "args", "says"), MISTAKES,
                         ids=[f"{m}-{' '.join(a)}" for m, a, _ in MISTAKES])  # fmt: skip
def test_a_mistake_on_the_command_line_is_one_line_exit_2(
    module: str, args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        importlib.import_module(module).main(args)
    assert stop.value.code == 2
    out = capsys.readouterr()
    prog = module.removesuffix(".__main__")
    assert out.err.startswith("error: ") and out.err.count("\n") == 1 and not out.out, out.err
    assert says in out.err and out.err.endswith(f"; see python -m {prog} --help\n"), out.err


def test_the_line_is_what_a_user_sees_from_the_shell(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "ssmax.tracking.ui", "--port", "abc"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2 and not done.stdout
    assert done.stderr == (
        "error: argument --port: 'abc' is not a port; allowed: 1-65535; see python -m "
        "ssmax.tracking.ui --help\n"
    )


def test_every_entry_parses_with_the_projects_parser() -> None:
    """A new entry that builds argparse.ArgumentParser itself would print argparse's usage
    block and name no allowed option: it must build ssmax.host.cli.Parser."""
    own = [p.relative_to(SRC) for p in SRC.rglob("*.py")
           if "ArgumentParser(" in p.read_text() and p.name != "cli.py"]  # fmt: skip
    assert own == []
    parsed = {str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if "Parser(" in p.read_text()}
    named = {m.removeprefix("ssmax.").replace(".", "/") + ".py" for m, _, _ in MISTAKES}
    assert parsed - {"host/cli.py"} == named
