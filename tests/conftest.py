"""Shared fixtures: composed configs and a session-wide data cache (tokenizers train once)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from ssmax.config import CONF_DIR

VARIANTS = sorted(p.stem for p in (CONF_DIR / "variant").glob("*.yaml"))
PRESETS = sorted(p.stem for p in (CONF_DIR / "preset").glob("*.yaml"))


def make_cfg(*overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")
