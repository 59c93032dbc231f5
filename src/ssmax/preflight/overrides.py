"""A key the config lacks, named first: where composing the command line's overrides fails,
check_override_keys's one line (the key and its nearest neighbours) before whatever else
failed. Its reference config costs a compose (0.12-0.15 s of CPU), so the entry points compose
first and ask only once that failed: a key the config lacks always fails there (Hydra's struct
check, or the schema's rules for a `+key=` addition)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ssmax.config.compose import ConfigError, check_override_keys


@contextmanager
def keys_named_first(argv: Sequence[str], config_name: str, prefix: str = "") -> Iterator[None]:
    """Run the block that composes argv; if it fails, a key argv sets that the config lacks
    fails instead (ConfigError, prefix + its line), else the block's own error."""
    try:
        yield
    except Exception:
        try:
            check_override_keys(argv, config_name=config_name)
        except ConfigError as key_error:
            raise ConfigError(f"{prefix}{key_error}") from None
        except Exception:  # noqa: BLE001, S110 - the reference failed too: the block's error
            pass
        raise
