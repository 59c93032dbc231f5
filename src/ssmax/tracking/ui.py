"""The MLflow UI over a pipeline's store: ``start_ui`` / ``stop_ui`` (tests, `make mlflow-ui`).

`python -m ssmax.tracking.ui --output-dir outputs --port 5000` serves until Ctrl-C. The server
runs in its own session (setsid) because its worker children outlive a plain kill of the
parent; stopping signals the whole process group. The command stops it on SIGINT, SIGTERM and
SIGHUP, and when its own parent dies (a closed terminal, a killed job script); on Linux the
kernel stops it when the command itself is killed (SIGKILL: DIE_WITH_PARENT): no server is
left on the port. Job execution is off: the store needs none.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ssmax.host.cli import Parser, port
from ssmax.tracking.auth import is_loopback, open_warning
from ssmax.tracking.store import STORE_FILE, default_store


@dataclass
class UIServer:
    process: subprocess.Popen
    url: str  # e.g. http://127.0.0.1:5000
    log: Path  # the server's stdout and stderr


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_in_use(host: str, port: int) -> str | None:
    """Why (host, port) cannot be served on, or None when it can. Bound as the server binds
    (uvicorn: SO_REUSEADDR): the TIME_WAIT sockets a stopped server leaves for a minute do not
    count, a socket listening there does."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            return err.strerror or str(err)
    return None


def _last_line(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


def start_ui(
    output_dir: str | Path, port: int | None = None, host: str = "127.0.0.1",
    backend_uri: str | None = None, timeout: float = 120.0,
    artifacts_destination: str | None = None, allowed_hosts: list[str] | None = None,
    logins: dict[str, str] | None = None,
) -> UIServer:  # fmt: skip
    """Start `mlflow server` on the store of output_dir and wait until /health answers.

    artifacts_destination: where the server keeps the artifacts it proxies for its clients
    (ssmax.tracking.server); allowed_hosts: the Host headers it answers (MLflow's default:
    localhost and private addresses); logins: the environment of MLflow's basic-auth app
    (ssmax.tracking.auth), which then lets in only its users."""
    port = port or free_port(host)
    log = Path(output_dir) / f"mlflow-ui-{port}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    # PYTHONSAFEPATH: the output folder (the cwd) is not on sys.path in the server and the
    # uvicorn it starts: a file there named like a module MLflow imports (click.py) would be
    env = os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PYTHONSAFEPATH": "1"}
    command = [
        sys.executable, "-m", "mlflow", "server",
        "--backend-store-uri", backend_uri or default_store(output_dir),
        "--host", host, "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    if artifacts_destination:
        command += ["--serve-artifacts", "--artifacts-destination", artifacts_destination]
    if allowed_hosts:
        command += ["--allowed-hosts", ",".join(allowed_hosts)]
    if logins is not None:
        command += ["--app-name", "basic-auth"]
        env |= logins
    command = die_with_this_thread(command)
    server = None
    try:  # a signal or Ctrl-C while it starts stops it too
        # a stop signal during Popen would lose the started server (seen: a SIGTERM as its log
        # appeared left `mlflow server` running): it is delivered once the server is known
        with stop_signals_deferred(), open(log, "wb") as out:
            # cwd: where a server without --artifacts-destination keeps new experiments'
            # artifacts (./mlartifacts): the output folder, not wherever the command started
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                       cwd=Path(output_dir), start_new_session=True)  # fmt: skip
            server = UIServer(process, f"http://{host}:{port}", log)
        _wait_healthy(server, timeout)
    except BaseException:
        if server is not None:
            stop_ui(server)
        raise
    return server


# The server's first program on Linux: the kernel sends it SIGTERM when the thread that started
# it ends, however it ends (SIGKILL included), then it becomes `mlflow server` (execv keeps the
# request), which passes SIGTERM to its uvicorn. A parent already gone: it never starts.
DIE_WITH_PARENT = """
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    sys.exit("its parent is gone")
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


def die_with_this_thread(command: list[str]) -> list[str]:
    """command (a Python one: sys.executable first) so that it ends with the calling thread
    (Linux; elsewhere as it is). Only from the main thread: PR_SET_PDEATHSIG follows the thread
    that forks, and another one may end while its process serves on."""
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return command
    return [sys.executable, "-c", DIE_WITH_PARENT, str(os.getpid()), *command[1:]]


@contextmanager
def stop_signals_deferred() -> Iterator[None]:
    """Hold SIGTERM, SIGINT and SIGHUP until the block ends, then deliver the first that came
    to the handler in place before (in the main thread; elsewhere signals never run here)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    held = {
        sig: signal.signal(sig, lambda signum, frame: came.append(signum)) for sig in STOP_SIGNALS
    }
    try:
        yield
    finally:  # blocked while put back: a signal now finds every handler as it was
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        for sig, handler in held.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if came:
            signal.raise_signal(came[0])


def _wait_healthy(server: UIServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"mlflow server exited ({server.process.returncode}): "
                               f"{_last_line(server.log)}; see {server.log}")  # fmt: skip
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:  # not listening yet: a refused connect costs nothing, ask often
            time.sleep(0.1)
    raise TimeoutError(f"mlflow server gave no /health in {timeout:.0f} s; see {server.log}")


def stop_ui(server: UIServer, grace: float = 10.0) -> None:
    """SIGTERM the server's process group, SIGKILL what is left after ``grace`` seconds."""
    try:
        pgid = os.getpgid(server.process.pid)
    except ProcessLookupError:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        try:
            server.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        if not _group_alive(pgid):
            break
    server.process.poll()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Stopped(Exception):
    """A stop signal arrived (SIGTERM, SIGINT, SIGHUP)."""


def _stop(signum: int, frame: object) -> None:
    raise Stopped(signal.Signals(signum).name)


def serve_until_stopped(start: Callable[[], UIServer], banner: Callable[[UIServer], str]) -> int:
    """Start a server, print its banner and serve until SIGINT, SIGTERM or SIGHUP, the death
    of this process's parent (it is adopted: getppid changes) or the server's own exit; then
    stop it and every process under it. The exit status: 0 once stopped; 2 when the server
    refused its settings (it exited while starting); 1 when it gave no /health in time or
    ended by itself (one line on stderr for each)."""
    parent = os.getppid()  # before the banner: a parent that dies once it has read it is seen
    for sig in STOP_SIGNALS:
        signal.signal(sig, _stop)
    server = None
    try:  # one block from start to stop: a signal at any point ends in stop_ui
        server = start()
        print(banner(server), flush=True)
        while server.process.poll() is None and os.getppid() == parent:
            time.sleep(0.5)
        if server.process.poll() is None:
            return 0  # the parent died
        print(f"error: mlflow server exited ({server.process.returncode}); see {server.log}",
              file=sys.stderr)  # fmt: skip
        return 1
    except Stopped:
        return 0
    except (RuntimeError, TimeoutError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2 if isinstance(err, RuntimeError) else 1
    finally:
        for sig in STOP_SIGNALS:  # a second signal must not cut the stop short
            signal.signal(sig, signal.SIG_IGN)
        if server is not None:
            stop_ui(server)


def training_view(url: str, experiment_id: str | None = None) -> str:
    """The UI's address on its model-training view (the experiment's runs where one is named):
    MLflow 3 opens on its GenAI view unless the address asks (workflowType) or the browser
    chose "Model training" in the sidebar once (it keeps that choice)."""
    page = f"experiments/{experiment_id}/runs" if experiment_id else ""
    return f"{url}/#/{page}?workflowType=machine_learning"


def only_experiment(output_dir: str | Path) -> str | None:
    """The id of the store's one experiment besides MLflow's Default (None: none or several);
    read with sqlite3, not MLflow, so that the command starts at once."""
    import sqlite3

    path = Path(output_dir) / STORE_FILE
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        try:
            rows = db.execute("SELECT experiment_id FROM experiments WHERE name != 'Default' "
                              "AND lifecycle_stage = 'active'").fetchall()  # fmt: skip
        except sqlite3.Error:
            return None
    return str(rows[0][0]) if len(rows) == 1 else None


def main(argv: list[str] | None = None) -> int:
    parser = Parser("ssmax.tracking.ui", description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default="outputs", help="the pipeline's paths.output_dir")
    parser.add_argument("--port", type=port, default=5000)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    if not (Path(args.output_dir) / STORE_FILE).exists():
        print(f"error: no MLflow store at {args.output_dir}/{STORE_FILE}", file=sys.stderr)
        return 2
    busy = port_in_use(args.host, args.port)
    if busy:
        print(f"error: --port {args.port} on {args.host} is in use ({busy}); pick another, e.g. "
              f"make mlflow-ui PORT={free_port(args.host)}", file=sys.stderr)  # fmt: skip
        return 2
    if not is_loopback(args.host):  # this viewer has no logins; make mlflow-server has
        remedy = "`make mlflow-server` serves with logins"
        print(open_warning(args.host, args.port, remedy), file=sys.stderr, flush=True)
    return serve_until_stopped(
        lambda: start_ui(args.output_dir, args.port, args.host),
        lambda server: (
            f"MLflow UI: {training_view(server.url, only_experiment(args.output_dir))}  "
            f"(log: {server.log}; Ctrl-C stops it)"
        ),  # fmt: skip
    )


if __name__ == "__main__":
    sys.exit(main())
