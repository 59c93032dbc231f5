"""Module fixture `tracking_server`: a real `mlflow server` as `make mlflow-server` starts it
(`python -m ssmax.tracking.server`: logins on, sqlite store and artifacts proxied in its own
folder) as a cluster uses it, with a user its admin made; the module's tests log in as that
user through the environment. `assert_all_on_server` reads back through the server
everything a pipeline logged; `leaks` finds the files that hold a secret. Loaded by
tests/conftest.py (`pytest_plugins`); used by test_tracking_server (in process),
test_tracking_logins (local workers, refused clients) and test_pipeline_slurm (on the local
SLURM cluster)."""

from __future__ import annotations

import os
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from mlflow import MlflowClient

from ssmax.tracking import auth
from ssmax.tracking.ui import free_port

RUNNER = "runner"  # the user the tests' pipelines log in as: not the admin


class TrackingServer(NamedTuple):
    uri: str
    artifacts: Path  # where it keeps the artifacts it proxies
    home: Path  # its --dir: store, users, admin password, log
    secrets: dict[str, str]  # what no file a run writes may hold: what it is -> its value


def group_gone(pgid: int, deadline_s: float = 30.0) -> bool:
    """Whether the process group is gone within a generous deadline (stopping is not instant)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def read_until(process: subprocess.Popen, text: str, deadline_s: float = 120.0) -> str:
    """The server's stdout up to text (a generous deadline: it imports MLflow and starts
    uvicorn, tens of seconds on a loaded machine). Unbuffered reads: select sees the pipe."""
    seen, end = b"", time.monotonic() + deadline_s
    fd = process.stdout.fileno()
    while text.encode() not in seen and time.monotonic() < end and process.poll() is None:
        if select.select([fd], [], [], 1.0)[0]:
            seen += os.read(fd, 4096)
    return seen.decode()


def start_entry(folder: Path, port: int, stdout: int, *extra: str, **popen) -> subprocess.Popen:
    """`python -m ssmax.tracking.server` (`make mlflow-server`) over folder on port."""
    command = [sys.executable, "-m", "ssmax.tracking.server", "--dir", str(folder), "--port"]
    return subprocess.Popen([*command, str(port), *extra], stdout=stdout, **popen)


def server_group(said: str) -> int:
    """The process group of the server whose banner is said."""
    return int(said.split("process group ")[1].split(")")[0])


def logged_in(monkeypatch: pytest.MonkeyPatch, user: str, password: str) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)


@pytest.fixture(scope="module")
def tracking_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TrackingServer]:
    """A tracking server with logins in its own temporary folder, and user RUNNER (made by its
    admin, default permission EDIT); the module's tests log in as RUNNER (the environment,
    for the module). Stopped (its whole process group) after the module."""
    home = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    entry = start_entry(home, port, subprocess.PIPE)
    pgid = None
    try:
        said = read_until(entry, "tracking.tracking_uri=")
        assert "tracking.tracking_uri=" in said, said
        pgid = server_group(said)
        uri = f"http://127.0.0.1:{port}"
        admin = (home / auth.PASSWORD_FILE).read_text().strip()
        runner = secrets.token_urlsafe(18)
        with pytest.MonkeyPatch.context() as env:
            from mlflow.server import get_app_client

            logged_in(env, auth.ADMIN, admin)
            get_app_client("basic-auth", tracking_uri=uri).create_user(RUNNER, runner)
            logged_in(env, RUNNER, runner)
            key = (home / auth.SECRET_KEY_FILE).read_text().strip()
            found = {"admin password": admin, "runner password": runner, "flask secret key": key}
            yield TrackingServer(uri, home / "artifacts", home, found)
    finally:
        if entry.poll() is None:
            entry.send_signal(signal.SIGTERM)  # its handler stops the server's group
            entry.wait(timeout=60)
    assert pgid is None or group_gone(pgid)


def leaks(server: TrackingServer, *roots: Path) -> list[str]:
    """Every file under roots and the server's folder that holds one of its secrets (as text
    or inside a pickle, a database, a log: the bytes are searched), but the server's own file
    for that secret: `<path>: <what>`."""
    own = {"admin password": auth.PASSWORD_FILE, "flask secret key": auth.SECRET_KEY_FILE}
    found = []
    for path in sorted({p for root in (*roots, server.home) for p in root.rglob("*")}):
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        for what, value in server.secrets.items():
            if value.encode() in data and path != server.home / own.get(what, ""):
                found.append(f"{path}: {what}")
    return found


def assert_nothing_secret_logged(server: TrackingServer, experiment: str) -> None:
    """No param, tag or run name of the experiment's runs holds a secret (read back through
    the server: what the UI shows)."""
    client = MlflowClient(server.uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id])
    assert runs
    for run in runs:
        texts = [run.info.run_name, *run.data.params.values(), *run.data.tags.values()]
        for what, value in server.secrets.items():
            assert not any(value in str(t) for t in texts), (run.info.run_id, what)


def assert_all_on_server(
    uri: str, artifacts: Path, out: Path, experiment: str, nodes: set[str]
) -> None:
    """Everything the pipeline in out logged (one child run per node in nodes, which hold
    (a_softmax)'s DAG), read back through the server; none of it on the client."""
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp.artifact_location.startswith("mlflow-artifacts:")  # the server's, proxied
    (parent,) = client.search_runs([exp.experiment_id], "tags.kind = 'pipeline'")
    assert parent.info.status == "FINISHED"
    children = client.search_runs(
        [exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'"
    )
    by_node = {c.data.tags["node"]: c for c in children}
    assert set(by_node) == nodes and len(children) == len(nodes)
    for node in ("pretrain/a_softmax/seed0", "sft/a_softmax/seed0"):
        run = by_node[node]
        assert run.info.status == "FINISHED" and run.data.params["seed"] == "0"
        history = client.get_metric_history(run.info.run_id, "train/loss")
        assert len(history) > 1 and all(m.value > 0 for m in history)
        assert run.inputs.dataset_inputs  # the data it read, as MLflow datasets
        assert "system/cpu_utilization_percentage" in run.data.metrics  # through the spool
        assert "config.yaml" in {a.path for a in client.list_artifacts(run.info.run_id)}
    # the report and its figures on the pipeline's run, downloaded through the server
    names = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"report.md", "report.html", "fig7.png", "claims.json", "config.yaml"} <= names
    got = Path(client.download_artifacts(parent.info.run_id, "fig7.png", str(out / "got")))
    local = next((out / "pipeline" / "nodes" / "report").rglob("report/fig7.png"))
    assert got.read_bytes() == local.read_bytes()
    # the export's model in the run that trained it, and its registered version
    versions = client.search_model_versions("name = 'ssmax-a_softmax'")
    trained = {by_node["pretrain/a_softmax/seed0"].info.run_id, by_node["sft/a_softmax/seed0"]
               .info.run_id}  # fmt: skip
    assert trained <= {v.run_id for v in versions}  # other pipelines on the server add theirs
    for run_id in trained:  # a LoggedModel of each, its files on the server
        query = f"source_run_id = '{run_id}'"
        (logged,) = client.search_logged_models([exp.experiment_id], filter_string=query)
        assert "MLmodel" in {a.path for a in client.list_logged_model_artifacts(logged.model_id)}
    # the files are in the server's artifact destination, none in the client's folder
    assert any(p.name == "fig7.png" for p in artifacts.rglob("*"))
    mine = out / "mlartifacts"
    assert not mine.exists() or not any(mine.iterdir())
