"""Whether a tracking server answers, asked once with a short timeout (no retries): the
commands check it before any work, so an unreachable server costs seconds and one line, not
MLflow's four minutes of retries and a traceback."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ssmax.tracking import is_server, tracking_uri

if TYPE_CHECKING:
    from omegaconf import DictConfig

PROBE_TIMEOUT_S = 5  # connect and read, each: 10 s at most, within the 15 s promised


def request(
    uri: str, endpoint: str, method: str, timeout: float, verify: bool = True, **kwargs: Any
) -> Any:
    """One attempt, no retries (the spool retries in its own loop); raises MlflowException when
    there is no reply, RestException when MLflow refuses (verify)."""
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request, verify_rest_response

    reply = http_request(get_default_host_creds(uri), endpoint, method, max_retries=0,
                         backoff_factor=0, timeout=timeout, **kwargs)  # fmt: skip
    return verify_rest_response(reply, endpoint) if verify else reply


def why(err: Exception, timeout: float) -> str:
    """A failed request's reason in a few words (MLflow's message holds urllib3's page)."""
    text = str(err).lower()
    if "timeout" in text or "timed out" in text:
        return f"no answer in {timeout:.0f} s"
    return "connection refused" if "refused" in text else "no answer"


def check_reachable(uri: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the tracking server at uri answers (any HTTP reply), else one line on what to
    do. Other URIs (sqlite, files) are local: None."""
    if not is_server(uri):
        return None
    from mlflow.exceptions import MlflowException

    try:  # any HTTP reply will do: the server is there
        request(uri, "/api/2.0/mlflow/experiments/search", "GET", timeout, verify=False,
                params={"max_results": 1})  # fmt: skip
    except MlflowException as err:
        return (f"tracking.tracking_uri={uri} is unreachable ({why(err, timeout)}): "
                "start the server (e.g. `make mlflow-server`) or unset tracking.tracking_uri "
                "to use the local sqlite store")  # fmt: skip
    return None


def check_tracking(cfg: DictConfig) -> bool:
    """The commands' check before any work: a tracking server that does not answer is one line
    in seconds (ConfigError), before any folder exists. True when the runs go to a server."""
    from ssmax.config import ConfigError

    uri = tracking_uri(cfg)
    if not cfg.tracking.enabled or not is_server(uri):
        return False
    problem = check_reachable(uri)
    if problem:
        raise ConfigError(problem)
    return True
