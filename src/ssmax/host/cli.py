"""The command line of the project's entries: argparse with the project's refusal."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn


class Parser(argparse.ArgumentParser):
    """argparse.ArgumentParser for `python -m <module>`, whose mistakes say one line,
    `error: <what>; see <prog> --help`, on stderr with exit status 2, as every entry of the
    project refuses a bad input (argparse prints its usage block first, and names no option
    where one is unknown: this lists them)."""

    def __init__(self, module: str, **kwargs: Any) -> None:
        super().__init__(prog=f"python -m {module}", **kwargs)

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments"):
            message += f"; allowed: {', '.join(self.options())}"
        self.exit(2, f"error: {message}; see {self.prog} --help\n")

    def options(self) -> list[str]:
        """The long options a user may give, --help last."""
        shown = [a for a in self._actions if a.help is not argparse.SUPPRESS]
        names = [o for a in shown for o in a.option_strings if o.startswith("--")]
        return [o for o in names if o != "--help"] + ["--help"]


def port(text: str) -> int:
    """argparse's type for a TCP port to listen on (a socket's bind would raise past 65535)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port; allowed: 1-65535")
    return value
