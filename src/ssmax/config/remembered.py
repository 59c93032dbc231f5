"""compose, remembered in this process: a config composed again from the same overrides, while
conf/'s files are unchanged, is a copy of the first (a compose costs ~0.1 s of CPU, a copy
~0.01 s). For processes that plan or compose the same pipeline more than once: the test suite
plans the smoke pipeline hundreds of times, a notebook as often as it is asked.

The config is what a node's fingerprint hashes, not how its result is computed: this module
shapes no result (ssmax.pipeline.stage_code.NO_RESULT)."""

from __future__ import annotations

import copy
from functools import lru_cache

from omegaconf import DictConfig

from ssmax.config.compose import CONF_DIR, compose

FileStates = tuple[tuple[str, int, int], ...]


def composed(*overrides: str, config_name: str = "config") -> DictConfig:
    """compose(*overrides, config_name=...): the same config, errors and all (an error is not
    remembered: it is raised again). A copy the caller may change."""
    return copy.deepcopy(_remembered(overrides, config_name, conf_files()))


def conf_files() -> FileStates:
    """Every file of conf/ with its modification time and size: an edit makes another key."""
    states = []
    for path in sorted(CONF_DIR.rglob("*")):
        if path.is_file():
            st = path.stat()
            states.append((str(path), st.st_mtime_ns, st.st_size))
    return tuple(states)


@lru_cache(maxsize=64)  # a few MB; a test run composes ~100 distinct configs, most once
def _remembered(overrides: tuple[str, ...], config_name: str, files: FileStates) -> DictConfig:
    return compose(*overrides, config_name=config_name)
