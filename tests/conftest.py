"""Shared fixtures: composed configs and a session-wide data cache (tokenizers train once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssmax.config import CONF_DIR
from ssmax.config import compose as make_cfg

__all__ = ["PRESETS", "VARIANTS", "make_cfg"]
pytest_plugins = ["tests.slurm_fixtures"]  # the session-wide local SLURM cluster

VARIANTS = sorted(p.stem for p in (CONF_DIR / "variant").glob("*.yaml"))
PRESETS = sorted(p.stem for p in (CONF_DIR / "preset").glob("*.yaml"))


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")
