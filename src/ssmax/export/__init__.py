"""Trained models out: a transformers folder (folder.py, hf.py; the law as shipped:
modeling_ssmax.py) and its command line (`python -m ssmax.export`)."""

from __future__ import annotations

import importlib.util

from ssmax.config.compose import ConfigError


def require_transformers() -> None:
    """transformers is the optional group [hf]: say so in one line where it is missing."""
    if importlib.util.find_spec("transformers") is None:
        raise ConfigError("the export needs transformers: pip install -e '.[hf]' (make setup "
                          "installs it)")  # fmt: skip
