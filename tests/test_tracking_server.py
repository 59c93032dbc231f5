"""A real `mlflow server` (tests/tracking_fixtures.py) as a cluster uses it: the smoke
pipeline of one variant runs against it in process, and everything it logged is read back
through the server's API; nothing lands in the client's <output_dir>/mlartifacts (the same on
the local SLURM cluster: test_pipeline_slurm). Nodes that create the experiment at once share
it. Also `python -m ssmax.tracking.server` (`make mlflow-server`): it serves, says the URI,
stops its process group on SIGTERM, and refuses bad input in one line."""

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

from ssmax.pipeline.__main__ import main
from ssmax.pipeline.run import plan
from ssmax.report.__main__ import main as report_main
from ssmax.tracking import auth
from ssmax.tracking.reach import check_reachable
from ssmax.tracking.server import main as server_main
from ssmax.tracking.ui import free_port
from tests.tracking_fixtures import (
    TrackingServer,
    assert_all_on_server,
    assert_nothing_secret_logged,
    group_gone,
    leaks,
    logged_in,
    read_until,
    server_group,
    start_entry,
)

pytestmark = pytest.mark.slow
# one variant covers every kind of node: two trainings (pretrain, sft: Lightning's runs with
# metrics and datasets), evals, export (a registered model) and the report (figures). The
# same DAG on SLURM against a server: test_pipeline_slurm (its smoke DAG holds this one).
ONE_VARIANT = "pipeline.variants=[a_softmax]"


def _pipeline(out: Path, cache: Path, uri: str, experiment: str, *extra: str) -> list[str]:
    return [
        "preset=smoke", ONE_VARIANT, f"paths.output_dir={out}", f"paths.cache_dir={cache}",
        f"tracking.tracking_uri={uri}", f"tracking.experiment={experiment}", *extra,
    ]  # fmt: skip


def test_pipeline_in_process_against_a_server(
    tracking_server: TrackingServer, tmp_path: Path, shared_cache: Path, capsys
) -> None:
    """Logged in through the environment (tracking_server): everything on the server, and no
    file the run wrote, no param or tag, nothing it said holds a password."""
    uri, artifacts = tracking_server.uri, tracking_server.artifacts
    out = tmp_path / "out"
    overrides = _pipeline(out, shared_cache, uri, "inprocess")
    assert main(["run", *overrides]) == 0
    captured = capsys.readouterr()
    said = captured.out  # the server's UI on its training view, not `mlflow ui`
    exp = MlflowClient(uri).get_experiment_by_name("inprocess")
    assert f"browse: open {uri}/#/experiments/{exp.experiment_id}/runs?workflowType=" in said
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    nodes = {job.name for job in plan(overrides)[1]}
    assert_all_on_server(uri, artifacts, out, "inprocess", nodes)
    assert not (out / "mlflow.db").exists()  # no store of its own either
    # the report rebuilt from the server's runs (their tags locate the nodes on disk)
    rebuilt = tmp_path / "rebuilt"
    args = ["--output-dir", str(out), "--dest", str(rebuilt), "--tracking-uri", uri]
    assert report_main(args) == 0
    assert (rebuilt / "report.md").exists()
    assert report_main(["--output-dir", str(out)]) == 2  # no sqlite: it asks for the URI
    assert "--tracking-uri http://HOST:PORT" in capsys.readouterr().err
    assert leaks(tracking_server, tmp_path) == []
    assert_nothing_secret_logged(tracking_server, "inprocess")
    told = captured.out + captured.err
    assert not any(value in told for value in tracking_server.secrets.values())


def test_each_folders_report_is_of_its_own_run_on_a_shared_server(
    tracking_server: TrackingServer, tmp_path: Path, shared_cache: Path, capsys
) -> None:
    """Two pipelines, folders b then a, track on one server: b's report is of b's pipeline run,
    not of the server's latest (a's: it named a's run, whose nodes b holds too, same
    fingerprints). Each folder records its run (pipeline/mlflow_run.json); a folder without
    that record asks for --run-id rather than guess on a server."""
    uri = tracking_server.uri
    # the pretrain node alone; seeds named: the report reads its settings from that node's
    # config, where the declaration's seeds are not filled in
    only = ("pipeline.targets=[pretrain]", "pipeline.seeds=[0]")
    for name in ("b", "a"):  # a's run starts last: the server's latest
        overrides = _pipeline(tmp_path / name, shared_cache, uri, "two-folders", *only)
        assert main(["run", *overrides]) == 0
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("two-folders")
    b_run, a_run = client.search_runs([exp.experiment_id], "tags.kind = 'pipeline'",
                                      order_by=["attributes.start_time ASC"])  # fmt: skip
    for name, mine, other in (("b", b_run, a_run), ("a", a_run, b_run)):
        dest = tmp_path / f"report-{name}"
        args = ["--output-dir", str(tmp_path / name), "--dest", str(dest), "--tracking-uri", uri]
        assert report_main(args) == 0
        said = (dest / "report.md").read_text()
        assert f"({mine.info.run_id})" in said and other.info.run_id not in said
    capsys.readouterr()
    (tmp_path / "b" / "pipeline" / "mlflow_run.json").unlink()  # a folder from before it
    args = ["--output-dir", str(tmp_path / "b"), "--dest", str(tmp_path / "old"), "--tracking-uri",
            uri]  # fmt: skip
    assert report_main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--run-id" in err and "mlflow_run.json" in err, err
    assert report_main([*args, "--run-id", b_run.info.run_id]) == 0
    assert f"({b_run.info.run_id})" in (tmp_path / "old" / "report.md").read_text()


def test_entry_serves_says_the_uri_and_stops_its_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Logins on by default: the admin's password made at random into a file only its owner
    reads, named in the banner and shown nowhere; a client needs a login."""
    port = free_port()
    process = start_entry(tmp_path, port, subprocess.PIPE)
    pgid = None
    try:
        said = read_until(process, "tracking.tracking_uri=")
        uri = f"http://127.0.0.1:{port}"
        assert f"tracking.tracking_uri={uri}" in said, said
        pgid = server_group(said)
        assert pgid != os.getpgid(process.pid)  # the server in a group of its own
        secret = tmp_path / auth.PASSWORD_FILE
        assert f"admin user 'admin', its password in {secret} (made now, mode 600)" in said
        assert secret.stat().st_mode & 0o777 == 0o600 and tmp_path.stat().st_mode & 0o777 == 0o700
        password = secret.read_text().strip()
        assert len(password) >= 24 and password not in said
        assert password not in (tmp_path / f"mlflow-ui-{port}.log").read_text()
        monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
        monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
        assert "needs a login (HTTP 401)" in check_reachable(uri)
        logged_in(monkeypatch, auth.ADMIN, password)
        assert check_reachable(uri) is None
        client = MlflowClient(uri)
        exp = client.get_experiment(client.create_experiment("e"))
        assert exp.artifact_location.startswith("mlflow-artifacts:")
        run = client.create_run(exp.experiment_id).info.run_id
        client.log_text(run, "hello", "note.txt")
        assert [p.read_text() for p in (tmp_path / "artifacts").rglob("note.txt")] == ["hello"]
        assert (tmp_path / "mlflow.db").exists()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0  # a stop asked for: it ends on SIGTERM ...
        assert group_gone(pgid)  # ... with the server and its workers
        with pytest.raises(ConnectionRefusedError):  # nothing listens (TIME_WAIT may linger)
            socket.create_connection(("127.0.0.1", port), timeout=5)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if pgid is not None and not group_gone(pgid, 0.1):  # a failed test leaves no server
            os.killpg(pgid, signal.SIGKILL)


def test_entry_restarts_at_once_on_the_port_it_stopped_on(tmp_path: Path) -> None:
    """A client holding a connection when the server stops (a pipeline's MLflow client, a
    browser) leaves the server's port in TIME_WAIT for a minute; nothing listens there, and
    `make mlflow-server` again on that port serves (it said "in use; pick another")."""
    port = free_port()
    first = start_entry(tmp_path, port, subprocess.PIPE)
    second = None
    secret = tmp_path / auth.PASSWORD_FILE
    try:
        assert "tracking.tracking_uri=" in read_until(first, "tracking.tracking_uri=")
        password = secret.read_text()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as held:  # keep-alive
            held.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert held.recv(4096).startswith(b"HTTP/1.1 200")
            first.send_signal(signal.SIGTERM)
            assert first.wait(timeout=60) == 0
            while held.recv(4096):  # the server closed it first: its side waits (TIME_WAIT)
                pass
        with socket.socket() as plain, pytest.raises(OSError):  # the case: a bind without
            plain.bind(("127.0.0.1", port))  # SO_REUSEADDR is refused
        second = start_entry(tmp_path, port, subprocess.PIPE)
        said = read_until(second, "tracking.tracking_uri=")
        assert f"tracking.tracking_uri=http://127.0.0.1:{port}" in said, said
        assert f"its password in {secret};" in said and secret.read_text() == password  # kept
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)  # its handler stops the server's group
                process.wait(timeout=60)


def test_entry_refuses_bad_input_in_one_line(tmp_path: Path, capsys) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert server_main(["--dir", str(tmp_path / "a"), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--port {port}" in err and "make mlflow-server PORT=" in err
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where a folder should be: unwritable even for root
    for bad in (["--dir", str(blocker / "d")], ["--artifacts-destination", str(blocker / "a")]):
        args = ["--dir", str(tmp_path / "ok"), "--port", str(free_port())]
        assert server_main(args + bad) == 2  # argparse: the later --dir wins
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "cannot write to" in err and str(blocker) in err
    args = ["--dir", str(tmp_path / "ok"), "--port", str(free_port()), "--login-cache-s", "-1"]
    assert server_main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--login-cache-s -1: expected seconds >= 0" in err


@pytest.mark.parametrize(
    ("password", "said"),
    [("password1234", "old default password is public"), ("short", "5 characters")],
)
def test_entry_refuses_an_admin_password_mlflow_would_refuse_in_one_line(
    tmp_path: Path, password: str, said: str, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """MLFLOW_AUTH_ADMIN_PASSWORD that MLflow refuses (its old default, under 12 characters):
    one line before anything is made (MLflow itself: a traceback in the server's log)."""
    monkeypatch.setenv(auth.ADMIN_PASSWORD_ENV, password)
    folder = tmp_path / "server"
    assert server_main(["--dir", str(folder), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and auth.ADMIN_PASSWORD_ENV in err and said in err, err
    assert not folder.exists()


def test_entry_without_logins_off_loopback_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make mlflow-server HOST=0.0.0.0 AUTH=off`: it serves anyone, and says so on stderr;
    no login is made."""
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    port = free_port("0.0.0.0")
    process = start_entry(tmp_path, port, subprocess.PIPE, "--host", "0.0.0.0", "--auth", "off",
                          stderr=subprocess.PIPE)  # fmt: skip
    try:
        said = read_until(process, "tracking.tracking_uri=")
        assert "logins: off (anyone who reaches it)" in said, said
        assert check_reachable(f"http://127.0.0.1:{port}") is None  # no login asked for
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        err = process.stderr.read().decode()
        assert f"warning: serving without logins on 0.0.0.0:{port}" in err, err
        assert "AUTH=off" in err
        assert not (tmp_path / auth.PASSWORD_FILE).exists()
        assert not (tmp_path / auth.USERS_DB).exists()
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # its handler stops the server's group
            process.wait(timeout=60)


def test_ui_off_loopback_warns(tmp_path: Path) -> None:
    """`python -m ssmax.tracking.ui --host 0.0.0.0` (the local viewer, never with logins):
    it serves, and says on stderr that anyone can; `make mlflow-ui` stays on 127.0.0.1."""
    from ssmax.tracking.store import create_sqlite_store, default_store

    create_sqlite_store(default_store(tmp_path), None)
    port = free_port("0.0.0.0")
    command = [sys.executable, "-m", "ssmax.tracking.ui", "--output-dir", str(tmp_path),
               "--host", "0.0.0.0", "--port", str(port)]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert "MLflow UI:" in read_until(process, "MLflow UI:")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        err = process.stderr.read().decode()
        assert f"warning: serving without logins on 0.0.0.0:{port}" in err, err
        assert "`make mlflow-server` serves with logins" in err
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # its handler stops the server's group
            process.wait(timeout=60)


def test_nodes_creating_the_experiment_at_once_share_it(
    tracking_server: TrackingServer, tmp_path: Path
) -> None:
    """Jobs on several nodes may each find no experiment and create it (no file lock spans
    machines): the server refuses the second create, and that job reads the first's back."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    from mlflow.exceptions import MlflowException

    from ssmax.config.compose import compose
    from ssmax.tracking.store import ensure_experiment

    uri = tracking_server.uri
    cfg = compose(f"paths.output_dir={tmp_path}", f"tracking.tracking_uri={uri}",
                  "tracking.experiment=raced")  # fmt: skip
    start = Barrier(4)

    def create(_: int) -> str:
        start.wait()
        return ensure_experiment(cfg)

    with ThreadPoolExecutor(4) as pool:
        ids = set(pool.map(create, range(4)))
    assert len(ids) == 1
    with pytest.raises(MlflowException) as refused:  # what the losers of the race get
        MlflowClient(uri).create_experiment("raced")
    assert refused.value.error_code == "RESOURCE_ALREADY_EXISTS"
    assert not (tmp_path / "mlartifacts").exists()


def _processes_naming(text: str) -> list[int]:
    """Pids whose command line mentions text (the process table, read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().decode():
                found.append(int(entry.name))
        except OSError:  # gone meanwhile
            continue
    return found


def _left_naming(text: str, deadline_s: float = 30.0) -> list[int]:
    """The processes naming text once they are gone or deadline_s has passed (a stopped
    server's group gets SIGTERM, then SIGKILL after 10 s)."""
    end = time.monotonic() + deadline_s
    while _processes_naming(text) and time.monotonic() < end:
        time.sleep(0.2)
    return _processes_naming(text)


def test_entry_stopped_while_starting_leaves_no_server(tmp_path: Path) -> None:
    port = free_port()
    process = start_entry(tmp_path, port, subprocess.DEVNULL)
    log, end = tmp_path / f"mlflow-ui-{port}.log", time.monotonic() + 120
    while not log.exists() and time.monotonic() < end and process.poll() is None:
        time.sleep(0.05)  # the server is spawned once its log exists
    assert log.exists()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    assert _left_naming(str(tmp_path)) == []


# The entry as `python -m ssmax.tracking.server`, but it sends itself SIGTERM the instant the
# server process exists, before Popen has returned it: the one moment at which the entry did
# not yet hold its server (the test above hit it by chance; the server was left running).
STOP_AS_SPAWNED = """
import os, signal, sys
from ssmax.tracking.server import main

def stop_as_spawned(frame, event, arg):
    if event == "return" and frame.f_code.co_name == "_execute_child":
        if "server" in frame.f_locals.get("args", ()):
            sys.setprofile(None)
            os.kill(os.getpid(), signal.SIGTERM)

sys.setprofile(stop_as_spawned)
sys.exit(main(sys.argv[1:]))
"""


def test_entry_stopped_as_its_server_is_spawned_leaves_no_server(tmp_path: Path) -> None:
    command = [sys.executable, "-c", STOP_AS_SPAWNED, "--dir", str(tmp_path), "--port"]
    done = subprocess.run([*command, str(free_port())], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    try:
        assert done.returncode == 0, done.stderr
        assert _left_naming(str(tmp_path)) == []
    finally:  # a server left running must not outlive the test: its group, workers too
        for pid in _processes_naming(str(tmp_path)):
            with contextlib.suppress(ProcessLookupError):  # the server leads its own group
                os.killpg(pid, signal.SIGKILL)
