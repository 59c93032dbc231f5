"""A tracking server with logins (tests/tracking_fixtures.py: as `make mlflow-server` starts
it): a client without a login, or with a wrong one, is refused in one line before any work;
a password in the tracking URI is refused without being shown; the smoke pipeline logged in
on local workers logs everything, and no file it wrote holds a password (in process and on
SLURM: test_tracking_server, test_pipeline_slurm)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from multiprocessing import forkserver
from pathlib import Path

import pytest

from ssmax.pipeline.__main__ import main
from ssmax.pipeline.run import plan
from ssmax.report.__main__ import main as report_main
from ssmax.tracking import auth
from tests.tracking_fixtures import (
    RUNNER,
    TrackingServer,
    assert_all_on_server,
    assert_nothing_secret_logged,
    leaks,
)

pytestmark = pytest.mark.slow
LOGIN = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
WRONG = "not-the-runners-password"

# what the client has -> what its one line says
REFUSED = {
    "no login": ({}, ["needs a login (HTTP 401)", "set MLFLOW_TRACKING_USERNAME and "
                      "MLFLOW_TRACKING_PASSWORD", "make mlflow-server"]),
    "a user, no password": ({LOGIN[0]: RUNNER}, ["needs a login (HTTP 401)",
                                                  "set MLFLOW_TRACKING_PASSWORD ("]),
    "a wrong password": ({LOGIN[0]: RUNNER, LOGIN[1]: WRONG},
                         ["refused the credentials of user 'runner' (HTTP 401)"]),
}  # fmt: skip


def test_a_checked_login_is_trusted_for_the_cache_window(tracking_server: TrackingServer) -> None:
    """The server hashes a password (scrypt, ~0.1 s) once per login and window
    (--login-cache-s, on by default), not on every request of a pipeline's thousands: the
    runner's password changed behind the server's back (its users table) still works at once."""
    from mlflow import MlflowClient
    from werkzeug.security import generate_password_hash

    client = MlflowClient(tracking_server.uri)
    client.search_experiments()  # the runner's login checked, and kept
    users = sqlite3.connect(tracking_server.home / auth.USERS_DB)
    (old,) = users.execute("SELECT password_hash FROM users WHERE username=?", (RUNNER,)).fetchone()
    try:
        with users:
            users.execute("UPDATE users SET password_hash=? WHERE username=?",
                          (generate_password_hash("another-password-now"), RUNNER))  # fmt: skip
        client.search_experiments()  # without the cache: HTTP 401
    finally:
        with users:
            users.execute("UPDATE users SET password_hash=? WHERE username=?", (old, RUNNER))
        users.close()


@pytest.mark.parametrize("kind", list(REFUSED))
def test_a_client_without_a_valid_login_is_one_line_at_start(
    tracking_server: TrackingServer, tmp_path: Path, kind: str
) -> None:
    given, words = REFUSED[kind]
    env = {k: v for k, v in os.environ.items() if k not in LOGIN} | given
    done = subprocess.run(
        [sys.executable, "-m", "ssmax.pipeline", "run", "preset=smoke",
         f"paths.output_dir={tmp_path / 'out'}", f"tracking.tracking_uri={tracking_server.uri}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"tracking.tracking_uri={tracking_server.uri} " in lines[0], lines
    assert all(word in lines[0] for word in words), lines
    assert WRONG not in done.stdout + done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "nothing left behind"


def test_report_with_a_wrong_password_is_one_line(
    tracking_server: TrackingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv(LOGIN[1], WRONG)
    out = tmp_path / "out"
    assert report_main(["--output-dir", str(out), "--tracking-uri", tracking_server.uri]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "refused the credentials of user 'runner'" in lines[0], lines
    assert not out.exists()


def test_a_password_in_the_tracking_uri_is_one_line_that_hides_it(
    tracking_server: TrackingServer, tmp_path: Path, capsys
) -> None:
    """The config (tracking.tracking_uri with it) is logged to MLflow and written beside each
    node: a password there would be too. Refused before any work, even a right one."""
    password = tracking_server.secrets["runner password"]
    bare = tracking_server.uri.removeprefix("http://")
    out = tmp_path / "out"
    uri = f"http://{RUNNER}:{password}@{bare}"
    assert main(["run", "preset=smoke", f"paths.output_dir={out}",
                 f"tracking.tracking_uri={uri}"]) == 2  # fmt: skip
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and f"tracking.tracking_uri=http://{bare}: a password" in lines[0]
    assert "MLFLOW_TRACKING_PASSWORD" in lines[0], lines
    assert password not in captured.out + captured.err
    assert not out.exists()


def test_local_workers_log_in_and_write_no_password(
    tracking_server: TrackingServer, tmp_path: Path, shared_cache: Path, capsys, monkeypatch
) -> None:
    """executor=local (`make reproduce-all`'s for the tiny preset): every node in a worker
    process, logged in as the pipeline is now, though the forkserver its workers fork from
    started before the login (a process that ran a pipeline, then logged in); everything on
    the server; no password in any file it wrote (node folders, logs, config dumps, the
    report), param, tag or line it said."""
    forkserver._forkserver._stop()  # private, 3.8+: the next one starts without the login
    with monkeypatch.context() as before_login:
        for name in LOGIN:
            before_login.delenv(name)
        forkserver.ensure_running()
    out = tmp_path / "out"
    overrides = [
        "preset=smoke", "pipeline.variants=[a_softmax]", "executor=local",
        f"paths.output_dir={out}", f"paths.cache_dir={shared_cache}",
        f"tracking.tracking_uri={tracking_server.uri}", "tracking.experiment=local",
    ]  # fmt: skip
    assert main(["run", *overrides]) == 0
    nodes = {job.name for job in plan(overrides)[1]}
    uri, artifacts = tracking_server.uri, tracking_server.artifacts
    assert_all_on_server(uri, artifacts, out, "local", nodes)
    assert list((out / "pipeline" / "logs").glob("*.log"))  # the workers' logs: searched
    assert leaks(tracking_server, tmp_path) == []
    assert_nothing_secret_logged(tracking_server, "local")
    captured = capsys.readouterr()
    told = captured.out + captured.err
    assert not any(value in told for value in tracking_server.secrets.values())
