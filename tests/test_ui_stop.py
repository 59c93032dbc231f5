"""`python -m ssmax.tracking.ui` leaves nothing behind: on SIGTERM, SIGINT and SIGHUP, when it is
killed (SIGKILL: the kernel stops its server, Linux) and when its own parent dies, its `mlflow
server` and every process under it end and the port is free."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from ssmax.tracking.ui import free_port

pytestmark = pytest.mark.slow

DEADLINE_S = 120.0


def _ppid_and_state(pid: int) -> tuple[int, str] | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(fields[1]), fields[0]


def descendants(root: int) -> set[int]:
    """Every live process under root, from the process table (/proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (info := _ppid_and_state(int(entry.name))):
            children.setdefault(info[0], []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def listening(port: int) -> bool:
    """Something accepts connections on the port (binding would also fail on the TIME_WAIT
    sockets a closed server leaves)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return False
    return True


def alive(pid: int) -> bool:
    info = _ppid_and_state(pid)
    return info is not None and info[1] != "Z"  # a zombie has ended; its parent has yet to reap


def ps(pids: set[int]) -> str:
    """What is left of pids: pid, state and command line."""
    left = []
    for pid in sorted(pids):
        with contextlib.suppress(OSError):
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120]
            left.append(f"{pid} {_ppid_and_state(pid)} {command.decode(errors='replace')}")
    return "; ".join(left)


def wait_for(what: str, check, detail=lambda: "") -> None:  # noqa: ANN001
    end = time.monotonic() + DEADLINE_S
    while not check():
        if time.monotonic() > end:
            pytest.fail(f"timed out after {DEADLINE_S:.0f} s waiting for {what} {detail()}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ui")
    MlflowClient(f"sqlite:///{out}/mlflow.db").search_experiments()  # creates the store
    return out


# The UI runs under a parent of its own (a shell), so that the test can kill that parent.
LAUNCH = 'python -m ssmax.tracking.ui --output-dir "$1" --port "$2" & echo $! ; wait'


@pytest.mark.parametrize(
    "how", ["SIGTERM", "SIGINT", "SIGHUP", "SIGKILL", "parent dies", "parent dies at start"]
)
def test_ui_leaves_no_process_and_frees_the_port(store: Path, how: str) -> None:
    port = free_port()
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    launch = ["sh", "-c", LAUNCH, "sh", str(store), str(port)]
    parent = subprocess.Popen(launch, env=env, stdout=subprocess.PIPE, text=True,
                              start_new_session=True)  # fmt: skip
    tree: set[int] = set()
    try:
        ui = int(parent.stdout.readline())
        if how == "parent dies at start":  # its server is starting, no banner yet (the UI read
            wait_for("its server to start", lambda: descendants(ui))  # its parent after one)
            os.kill(parent.pid, signal.SIGKILL)
        assert parent.stdout.readline().startswith("MLflow UI: ")  # serving: /health answered
        tree = descendants(ui)
        assert tree, "the UI started no server"  # mlflow server and its uvicorn worker(s)
        if how == "parent dies":
            os.kill(parent.pid, signal.SIGKILL)
        elif how != "parent dies at start":
            os.kill(ui, getattr(signal, how))
        wait_for("the UI to end", lambda: not alive(ui))
        wait_for("its server to end", lambda: not any(alive(p) for p in tree), lambda: ps(tree))
        assert not listening(port)
    finally:  # on a failure, nothing either
        for kill, pid in [(os.killpg, parent.pid), *((os.kill, p) for p in tree)]:
            with contextlib.suppress(ProcessLookupError):
                kill(pid, signal.SIGKILL)
        parent.wait()


def test_a_module_named_file_in_the_output_folder_is_not_imported(tmp_path: Path) -> None:
    """The server runs in the output folder; a file there named like a module MLflow imports
    (click.py) was imported in its place (python puts the cwd first on sys.path): the server
    never answered. It runs with PYTHONSAFEPATH."""
    from ssmax.tracking.ui import start_ui, stop_ui

    MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").search_experiments()
    (tmp_path / "click.py").write_text("raise SystemExit('the output folder was imported')\n")
    server = start_ui(tmp_path, timeout=DEADLINE_S)
    try:
        assert listening(int(server.url.rsplit(":", 1)[1]))
    finally:
        stop_ui(server)
