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


@pytest.fixture(scope="session")
def smoke_pipeline(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> list[str]:
    """The smoke pipeline (the paper's declaration, in process) run once per session; its
    overrides. Tests share it: they read it, or account for the runs they add."""
    from ssmax.pipeline.__main__ import main

    out = tmp_path_factory.mktemp("smoke-pipeline")
    overrides = ["preset=smoke", f"paths.output_dir={out}", f"paths.cache_dir={shared_cache}"]
    assert main(["run", *overrides]) == 0
    return overrides
