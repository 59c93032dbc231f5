"""A tracking server for runs on several machines (`make mlflow-server`).

`python -m ssmax.tracking.server --dir outputs/mlflow-server --host 0.0.0.0 --port 5000`
starts a real `mlflow server` (ssmax.tracking.ui.start_ui: its own process group) with a SQL
store (default: sqlite in --dir; any SQLAlchemy URI with --backend-store-uri, e.g. Postgres
for many nodes) that proxies every artifact to --artifacts-destination (default: --dir's
artifacts/ folder; or s3://...). It prints the `tracking.tracking_uri=...` to set and serves
until Ctrl-C, SIGTERM or SIGHUP, or until its parent dies, then stops the server and its
workers (ssmax.tracking.ui.serve_until_stopped). It lets in only its users (MLflow's basic-auth
app, ssmax.tracking.auth); `--auth off` serves without logins, with a warning unless on a
loopback address.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from ssmax.host.cli import Parser, port
from ssmax.tracking import auth
from ssmax.tracking.store import default_store, sqlite_file
from ssmax.tracking.ui import (
    free_port,
    port_in_use,
    serve_until_stopped,
    start_ui,
    training_view,
)

ANY_ADDRESS = ("0.0.0.0", "::", "")


def client_host(host: str) -> str:
    """The name other machines reach a server bound to host by (getfqdn can say just
    "localhost" where /etc/hosts maps the hostname to 127.0.0.1: then the hostname)."""
    if host not in ANY_ADDRESS:
        return host
    fqdn = socket.getfqdn()
    return socket.gethostname() if fqdn.startswith("localhost") else fqdn


def allowed_hosts(host: str) -> list[str]:
    """MLflow's default Host headers (localhost, private addresses) and, when the server
    listens on every address, this machine's names: clients on other nodes use them."""
    from mlflow.server.security_utils import get_default_allowed_hosts

    names = {socket.gethostname(), socket.getfqdn(), client_host(host)} - {"", *ANY_ADDRESS}
    return get_default_allowed_hosts() + [p for n in sorted(names) for p in (n, f"{n}:*")]


def local_folder(uri: str) -> Path | None:
    """The local folder a path or file:// URI names; None for a remote store (s3://...)."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(parsed.path)
    return Path(uri) if not parsed.scheme else None


def unwritable(folder: Path) -> str | None:
    """Why folder cannot be created or written to, or None."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder):
            pass
    except OSError as err:
        return err.strerror or str(err)
    return None


def hide_password(uri: str) -> str:
    """uri with the password of its user part (postgresql://user:pw@host/db) as ***."""
    parsed = urlparse(uri)
    if parsed.password is None:
        return uri
    netloc = parsed.netloc.replace(f":{parsed.password}@", ":***@", 1)
    return parsed._replace(netloc=netloc).geturl()


def check(args: argparse.Namespace) -> str | None:
    """One line on what is wrong with the arguments, or None."""
    bad_password = auth.bad_admin_password() if args.auth == "on" else None
    if bad_password:
        return bad_password
    if args.login_cache_s < 0:
        return f"--login-cache-s {args.login_cache_s}: expected seconds >= 0 (0: no cache)"
    folders = [("--dir", Path(args.dir))]
    db = sqlite_file(args.backend_store_uri)
    if db is not None:
        folders.append(("--backend-store-uri", db.parent))
    artifacts = local_folder(args.artifacts_destination)
    if artifacts is not None:
        folders.append(("--artifacts-destination", artifacts))
    for option, folder in folders:
        why = unwritable(folder)
        if why:
            return f"{option}: cannot write to {folder} ({why}); pick a folder you can write to"
    busy = port_in_use(args.host, args.port)
    if busy:
        return (
            f"--port {args.port} on {args.host} is in use ({busy}); pick another, e.g. "
            f"make mlflow-server PORT={free_port(args.host)}"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    parser = Parser("ssmax.tracking.server", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="outputs/mlflow-server", help="its store, artifacts, log")
    parser.add_argument("--backend-store-uri", help="SQLAlchemy URI (default: sqlite in --dir)")
    parser.add_argument("--artifacts-destination", help="default: DIR/artifacts")
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0: reachable from other nodes")
    parser.add_argument("--port", type=port, default=5000)
    parser.add_argument("--allowed-hosts", help="Host headers served, comma-separated")
    parser.add_argument("--auth", choices=("on", "off"), default="on",
                        help="on: only its users get in (MLflow basic auth); off: anyone who "
                        "reaches it (a warning unless --host is a loopback address)")  # fmt: skip
    parser.add_argument("--default-permission", choices=auth.PERMISSIONS, default="EDIT",
                        help="what every user may do with runs others made (EDIT: read and "
                        "log, not delete)")  # fmt: skip
    parser.add_argument("--login-cache-s", type=int, default=auth.LOGIN_CACHE_S,
                        help="how long a checked login is trusted without hashing its password "
                        "again (0: every request; a password changed elsewhere may work that "
                        "long)")  # fmt: skip
    args = parser.parse_args(argv)
    folder = Path(args.dir).resolve()
    args.backend_store_uri = args.backend_store_uri or default_store(folder)
    args.artifacts_destination = args.artifacts_destination or str(folder / "artifacts")
    problem = check(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    artifacts = local_folder(args.artifacts_destination)
    destination = artifacts.resolve().as_uri() if artifacts else args.artifacts_destination
    hosts = args.allowed_hosts.split(",") if args.allowed_hosts else allowed_hosts(args.host)
    uri = f"http://{client_host(args.host)}:{args.port}"
    logins = None
    if args.auth == "on":
        folder.chmod(0o700)  # its store and users table: read through the server only
        logins = auth.prepare(folder, args.default_permission, args.login_cache_s)
    elif not auth.is_loopback(args.host):
        print(auth.open_warning(args.host, args.port), file=sys.stderr, flush=True)
    return serve_until_stopped(
        lambda: start_ui(
            folder, args.port, args.host, args.backend_store_uri,
            artifacts_destination=destination, allowed_hosts=hosts,
            logins=logins.env if logins else None,
        ),
        lambda server: (
            f"MLflow tracking server: {uri}, its UI at {training_view(uri)}  "
            f"(store: {hide_password(args.backend_store_uri)}; artifacts: "
            f"{destination}; log: {server.log}; process group {server.process.pid})\n"
            + (login_lines(logins) if logins else "logins: off (anyone who reaches it)\n")
            + f"run against it with:  tracking.tracking_uri={uri}   (Ctrl-C stops it)"
        ),
    )  # fmt: skip


def login_lines(logins: auth.Logins) -> str:
    """How users log in: the admin's password is named by where it is, never shown."""
    return (
        f"logins: on; admin user '{logins.admin}', its password {logins.admin_password}; "
        "more users: docs/cluster-and-tracking.md\n"
        f"clients log in through the environment: MLFLOW_TRACKING_USERNAME and "
        "MLFLOW_TRACKING_PASSWORD\n"
    )


if __name__ == "__main__":
    sys.exit(main())
