"""Module fixture `tracking_server`: a real `mlflow server` (sqlite store, artifacts proxied to
its own folder) as a cluster uses it, and `assert_all_on_server`, which reads back through
the server everything a pipeline logged. Loaded by tests/conftest.py (`pytest_plugins`); used
by test_tracking_server (in process) and test_pipeline_slurm (on the local SLURM cluster)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow import MlflowClient

from ssmax.tracking.ui import start_ui, stop_ui


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


@pytest.fixture(scope="module")
def tracking_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(URI, artifact folder) of a tracking server: sqlite store and artifact destination in
    its own temporary folder, stopped (its whole process group) after the module."""
    home = tmp_path_factory.mktemp("mlflow-server")
    artifacts = home / "artifacts"
    running = start_ui(
        home, backend_uri=f"sqlite:///{home / 'mlflow.db'}",
        artifacts_destination=artifacts.as_uri(),
    )  # fmt: skip
    pgid = os.getpgid(running.process.pid)
    assert pgid == running.process.pid  # its own group: stopping it stops its workers too
    try:
        yield running.url, artifacts
    finally:
        stop_ui(running)
    assert group_gone(pgid)


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
    for run_id in trained:
        assert "model/MLmodel" in {a.path for a in client.list_artifacts(run_id, "model")}
    # the files are in the server's artifact destination, none in the client's folder
    assert any(p.name == "fig7.png" for p in artifacts.rglob("*"))
    mine = out / "mlartifacts"
    assert not mine.exists() or not any(mine.iterdir())
