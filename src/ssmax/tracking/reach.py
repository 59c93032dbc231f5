"""Whether a tracking server answers, and as MLflow does, asked once with a short timeout (no
retries): the commands (training, the pipeline, the report) check it before any work, so an
unreachable server, a web server that is not MLflow or a URI MLflow keeps no runs at (ftp://)
costs seconds and one line, not MLflow's four minutes of retries and a traceback."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ssmax.tracking.store import is_server, tracking_uri

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


SEARCH = "/api/2.0/mlflow/experiments/search"  # what the check asks: any MLflow answers it
LOCAL_STORE = "unset tracking.tracking_uri to use the local sqlite store"


def unsupported_scheme(uri: str, setting: str = "tracking.tracking_uri") -> str | None:
    """One line when MLflow has no tracking store for uri's scheme (ftp://...), else None."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking._tracking_service.utils import _tracking_store_registry as stores
    from mlflow.utils.uri import get_uri_scheme

    try:
        stores.get_store_builder(uri)
    except MlflowException:
        served = ", ".join(s for s in ("http", "https", "sqlite", "postgresql", "mysql", "file")
                           if s in stores._registry)  # fmt: skip
        return (f"{setting}={uri}: MLflow keeps no runs at {get_uri_scheme(uri)}:// URIs "
                f"(it takes {served}); a tracking server is http://HOST:PORT (`make "
                "mlflow-server` prints it)")  # fmt: skip
    return None


def not_mlflow(reply: Any) -> str | None:
    """Why an HTTP reply to SEARCH is not a tracking server's (a JSON object, status 200)."""
    kind = reply.headers.get("Content-Type", "no content type").split(";")[0]
    if reply.status_code == 200 and kind == "application/json":
        try:
            if isinstance(reply.json(), dict):
                return None
        except ValueError:
            pass
    return f"HTTP {reply.status_code}, {kind}"


def without_user(uri: str) -> str:
    """uri without its user part (http://user:pw@host -> http://host)."""
    parsed = urlparse(uri)
    return parsed._replace(netloc=parsed.netloc.rpartition("@")[2]).geturl()


def password_in(uri: str, setting: str) -> str | None:
    """One line when uri holds a password (http://user:pw@host): the config, and with it the
    URI, is logged to MLflow and written beside every node; credentials stay in the
    environment. The line shows uri without its user part."""
    if urlparse(uri).password is None:
        return None
    way = ("set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD instead" if is_server(uri)
           else "give the database's password through its own file (~/.pgpass) or use a "
           "tracking server (`make mlflow-server BACKEND_STORE_URI=...`)")  # fmt: skip
    return (f"{setting}={without_user(uri)}: a password in the tracking URI would be logged "
            f"and written with the config; drop it and {way}")  # fmt: skip


def refused(status: int) -> str:
    """What a server's 401 or 403 means for this client's credentials (environment variables,
    or ~/.mlflow/credentials, as MLflow reads them), in words; never the password itself."""
    from mlflow.utils.credentials import read_mlflow_creds

    creds = read_mlflow_creds()
    if status == 403 and creds.username:
        return (f"lets user {creds.username!r} in but refuses this request (HTTP 403): ask its "
                "admin for permission")  # fmt: skip
    if creds.username and creds.password:
        return (f"refused the credentials of user {creds.username!r} (HTTP {status}): check "
                "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD")  # fmt: skip
    if os.environ.get("MLFLOW_TRACKING_TOKEN"):
        return (f"refused MLFLOW_TRACKING_TOKEN (HTTP {status}): set MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD for a server with logins")  # fmt: skip
    missing = " and ".join(name for name, value in (("MLFLOW_TRACKING_USERNAME", creds.username),
                           ("MLFLOW_TRACKING_PASSWORD", creds.password)) if not value)  # fmt: skip
    return (f"needs a login (HTTP {status}): set {missing} (`make mlflow-server` says where its "
            "admin's password is)")  # fmt: skip


def check_reachable(
    uri: str, timeout: float = PROBE_TIMEOUT_S, setting: str = "tracking.tracking_uri",
    otherwise: str = LOCAL_STORE,
) -> str | None:  # fmt: skip
    """None when uri is a store MLflow keeps runs at and, for a tracking server, one that
    answers as MLflow does; else one line on what to do (setting: the option that named uri;
    otherwise: the way out besides the server). Local stores (sqlite, files) are not opened."""
    problem = password_in(uri, setting) or unsupported_scheme(uri, setting)
    if problem or not is_server(uri):
        return problem
    from mlflow.exceptions import MlflowException

    try:
        reply = request(uri, SEARCH, "GET", timeout, verify=False, params={"max_results": 1})
    except MlflowException as err:
        return (f"{setting}={uri} is unreachable ({why(err, timeout)}): start the server "
                f"(e.g. `make mlflow-server`) or {otherwise}")  # fmt: skip
    if reply.status_code in (401, 403):  # an MLflow server with logins
        return f"{setting}={uri} {refused(reply.status_code)}"
    answer = not_mlflow(reply)
    if answer:
        return (f"{setting}={uri} answers but not as an MLflow tracking server does ({answer} "
                f"to GET {SEARCH}): check the host and port (`make mlflow-server` prints the URI "
                f"to set) or {otherwise}")  # fmt: skip
    return None


def check_tracking(cfg: DictConfig) -> bool:
    """The commands' check before any work: a URI MLflow keeps no runs at, or a tracking server
    that does not answer as MLflow does, is one line in seconds (ConfigError), before any folder
    exists. True when the runs go to a server."""
    # lazy: ssmax.config.compose loads torch and Hydra (~4 s measured on 2 busy cores);
    # `python -m ssmax.tracking.sync` (make sync) imports this module, and starts without them
    from ssmax.config.compose import ConfigError

    uri = tracking_uri(cfg)
    if not cfg.tracking.enabled:
        return False
    problem = check_reachable(uri)
    if problem:
        raise ConfigError(problem)
    return is_server(uri)
