"""Hugging Face Hub access: fail fast when it is unreachable, stay offline for local files.

`datasets` retries an unreachable hub for tens of seconds and hangs on an endpoint that never
answers, so every hub load is preceded by a bounded reachability check.
"""

from __future__ import annotations

import contextlib
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

from ssmax.host.environ import patched_environ

DEFAULT_ENDPOINT = "https://huggingface.co"
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


class DataUnavailableError(RuntimeError):
    """The data cannot be reached; the message is one line saying what to set."""


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")


def _probe(url: str, timeout: float, result: list[str | None]) -> None:
    """Append None if the Hub answered, else a short reason."""
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout)
        result.append(None)
    except urllib.error.HTTPError as exc:
        # Auth errors from the Hub itself still mean "reachable"; a bare 404/502 from a
        # firewall or proxy in between does not.
        hub = exc.code in (401, 403) and "x-request-id" in {k.lower() for k in exc.headers}
        result.append(None if hub else f"HTTP {exc.code}")
    except BaseException as exc:  # noqa: BLE001 - reported to the caller
        result.append(type(exc).__name__)


def require_hub(repo_id: str, local_key: str, timeout: float = 3.0) -> None:
    """Raise DataUnavailableError within ~timeout seconds unless the hub answers.

    The probe runs in a daemon thread so that slow DNS or a silent endpoint cannot block
    longer than the timeout.
    """
    endpoint = hub_endpoint()
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        reason = "HF_HUB_OFFLINE is set"
    else:
        result: list[str | None] = []
        url = f"{endpoint}/api/datasets/{repo_id}"
        thread = threading.Thread(target=_probe, args=(url, timeout, result), daemon=True)
        thread.start()
        thread.join(timeout + 0.5)
        if result and result[0] is None:
            return
        reason = result[0] if result else f"no answer in {timeout:.0f} s"
    raise DataUnavailableError(
        f"cannot reach the Hugging Face Hub at {endpoint} for {repo_id} ({reason}); "
        f"set {local_key} to local files, or use the offline default data=embedded"
    )


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """Mark HF libraries offline while loading local files (restored afterwards)."""
    with patched_environ(dict.fromkeys(_OFFLINE_VARS, "1")):
        yield
