"""This process's environment changed for a block and restored exactly afterwards."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping


@contextlib.contextmanager
def patched_environ(
    changes: Mapping[str, str | None] | None = None, /, **more: str | None
) -> Iterator[None]:
    """Set each variable of changes and more (None: unset it) for the block; afterwards, even
    when the block raises, every variable named is as it was: its old value back, or unset
    again where it was absent. Variables not named are left alone."""
    wanted = {**(changes or {}), **more}
    saved = {key: os.environ.get(key) for key in wanted}
    try:
        _put(wanted)
        yield
    finally:
        _put(saved)


def _put(values: Mapping[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
