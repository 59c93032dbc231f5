"""`make sync` (ssmax.tracking.sync) against a real `mlflow server` (tests/tracking_fixtures.py):
the one-variant smoke pipeline run offline (tracking.mode=offline: each node its own store,
merged into the folder's; the server it names never asked) and copied afterwards ends as the
same tree as the same pipeline run online against the server; a sync stopped halfway
completes; a second sync copies nothing; bad input is one line and leaves the local store as
it was."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from ssmax.pipeline.__main__ import main as pipeline_main
from ssmax.tracking.models import logged_model_id
from ssmax.tracking.sync import DONE_TAG, SOURCE_TAG, Sync, runs_in_order
from ssmax.tracking.sync import main as sync_main
from ssmax.tracking.ui import free_port
from tests.tracking_fixtures import TrackingServer, leaks

pytestmark = pytest.mark.slow
ONE_VARIANT = "pipeline.variants=[a_softmax]"  # every kind of node (tests/test_tracking_server)


def _run(out: Path, cache: Path, experiment: str, *extra: str) -> None:
    overrides = ["preset=smoke", ONE_VARIANT, f"paths.output_dir={out}",
                 f"paths.cache_dir={cache}", f"tracking.experiment={experiment}",
                 *extra]  # fmt: skip
    assert pipeline_main(["run", *overrides]) == 0


def _tree(client: MlflowClient, experiment: str) -> dict[str, dict[str, Any]]:
    """Each run by its path of names from the pipeline's run: what it logged, ids left out."""
    exp = client.get_experiment_by_name(experiment)
    runs = {r.info.run_id: r for r in runs_in_order(client, exp.experiment_id)}

    def path(run: Any) -> str:
        parent = runs.get(run.data.tags.get("mlflow.parentRunId", ""))
        return f"{path(parent)}/{run.info.run_name}" if parent else run.info.run_name

    def artifacts(run_id: str, folder: str = "") -> set[str]:
        found = set()
        for item in client.list_artifacts(run_id, folder or None):
            found |= artifacts(run_id, item.path) if item.is_dir else {item.path}
        return found

    logged: dict[str, list] = {}  # run id -> its logged models (a copy too many: seen)
    for model in client.search_logged_models([exp.experiment_id]):
        files = sorted(a.path for a in client.list_logged_model_artifacts(model.model_id))
        logged.setdefault(model.source_run_id, []).append((model.name, str(model.status), files))

    tree = {}
    for run in runs.values():
        rid = run.info.run_id
        tree[path(run)] = {
            "status": run.info.status,
            "params": set(run.data.params),
            "tags": {k for k in run.data.tags if k not in (SOURCE_TAG, DONE_TAG)},
            # system metrics: one step a sampling window, so their count follows the clock
            "metrics": {
                k: len(client.get_metric_history(rid, k))
                for k in run.data.metrics
                if not k.startswith("system/")
            },  # fmt: skip
            "system": {k for k in run.data.metrics if k.startswith("system/")},
            "artifacts": artifacts(rid),
            "datasets": len(run.inputs.dataset_inputs) if run.inputs else 0,
            "models": sorted(logged.get(rid, [])),
        }
    return tree


def _pipeline_names(tree: dict[str, Any]) -> dict[str, Any]:
    """The tree with its root's name (a pipeline run is named by its start time) made equal."""
    return {"/".join(["pipeline", *k.split("/")[1:]]): v for k, v in tree.items()}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_offline_pipeline_synced_later_equals_an_online_one(
    tracking_server: TrackingServer, tmp_path: Path, shared_cache: Path, capsys
) -> None:
    uri = tracking_server.uri  # logged in as its runner, through the environment
    offline, online = tmp_path / "offline", tmp_path / "online"
    nowhere = f"http://127.0.0.1:{free_port()}"  # offline: never asked (nothing answers there)
    _run(offline, shared_cache, "sync", "tracking.mode=offline", f"tracking.tracking_uri={nowhere}")
    _run(online, shared_cache, "sync-online", f"tracking.tracking_uri={uri}")
    nodes = sorted((offline / "pipeline" / "nodes").rglob("mlflow.db"))
    assert len(nodes) == len(list((offline / "pipeline" / "nodes").rglob("done.json")))
    # the report read the nodes' runs (learning curves) from the folder's store, as online
    reports = [next((out / "pipeline" / "nodes" / "report").rglob("report")) for out in
               (offline, online)]  # fmt: skip
    assert {p.name for p in reports[0].iterdir()} == {p.name for p in reports[1].iterdir()}
    assert "models:/ssmax-a_softmax@smoke-sft-seed0" in (reports[0] / "report.md").read_text()
    store, server = f"sqlite:///{offline / 'mlflow.db'}", MlflowClient(uri)
    local = MlflowClient(store)
    before = _sha(offline / "mlflow.db")
    capsys.readouterr()  # the pipelines' output

    # bad input: one line, status 2, the local store as it was
    for args, says in (
        (["--output-dir", str(tmp_path / "none")], "no MLflow store at"),
        (["--output-dir", str(offline), "--tracking-uri", f"http://127.0.0.1:{free_port()}"],
         "is unreachable"),
        (["--output-dir", str(offline), "--tracking-uri", "sqlite:///x.db"], "a tracking server"),
    ):  # fmt: skip
        if "--tracking-uri" not in args:
            args += ["--tracking-uri", uri]
        assert sync_main(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err
    # a run on the server that says it is a copy of a local run but is another one
    exp_id = server.create_experiment("sync")
    (root, *_) = runs_in_order(local, local.get_experiment_by_name("sync").experiment_id)
    impostor = server.create_run(exp_id, run_name="another", tags={SOURCE_TAG: root.info.run_id})
    assert sync_main(["--output-dir", str(offline), "--tracking-uri", uri]) == 2
    assert "another run under the same id" in capsys.readouterr().err
    server.delete_run(impostor.info.run_id)

    # stopped halfway: half the runs copied, the next one created and left incomplete
    runs = runs_in_order(local, local.get_experiment_by_name("sync").experiment_id)
    half = Sync(store, uri)
    for run in runs[: len(runs) // 2]:
        half.run(exp_id, run)
    cut = runs[len(runs) // 2]
    server.create_run(exp_id, run_name=cut.info.run_name, tags={SOURCE_TAG: cut.info.run_id})
    assert sync_main(["--output-dir", str(offline), "--tracking-uri", uri]) == 0
    said = capsys.readouterr().out
    assert f"{len(runs) - len(runs) // 2} runs copied, {len(runs) // 2} already there" in said
    synced = _tree(server, "sync")
    assert _pipeline_names(synced) == _pipeline_names(_tree(server, "sync-online"))
    assert _tree(local, "sync") == synced  # and what the local store holds, all of it

    # each metric step with its own timestamp; the registered versions and their aliases
    node = next(r for r in runs if r.data.tags.get("node") == "pretrain/a_softmax/seed0")
    (copy,) = server.search_runs([exp_id], f"tags.{SOURCE_TAG} = '{node.info.run_id}'")
    assert copy.info.start_time == node.info.start_time
    assert copy.info.end_time == node.info.end_time
    history = local.get_metric_history(node.info.run_id, "train/loss")
    copied = server.get_metric_history(copy.info.run_id, "train/loss")
    key = lambda m: (m.step, m.timestamp, m.value)  # noqa: E731
    assert sorted(map(key, copied)) == sorted(map(key, history)) and len(history) > 1
    versions = server.search_model_versions("name = 'ssmax-a_softmax'")
    mine = [v for v in versions if v.tags.get(SOURCE_TAG)]
    assert len(mine) == len(local.search_model_versions("name = 'ssmax-a_softmax'")) >= 2
    copies = {r.info.run_id for r in server.search_runs([exp_id])}
    assert {v.run_id for v in mine} <= copies
    # each version names the copy of its logged model, of its copied run
    for version in mine:
        assert version.source.startswith("models:/m-")  # search_model_versions: no model_id
        assert server.get_logged_model(logged_model_id(version)).source_run_id == version.run_id
    model = server.get_registered_model("ssmax-a_softmax")
    assert {"sft", "smoke-sft-seed0", "pretrain"} <= set(model.aliases)
    assert server.get_model_version_by_alias("ssmax-a_softmax", "sft").run_id in copies

    # again: nothing copied, nothing doubled; the local store was only read
    assert sync_main(["--output-dir", str(offline), "--tracking-uri", uri]) == 0
    assert f"0 runs copied, {len(runs)} already there" in capsys.readouterr().out
    assert _tree(server, "sync") == synced
    assert len(server.search_model_versions("name = 'ssmax-a_softmax'")) == len(versions)
    assert _sha(offline / "mlflow.db") == before
    assert leaks(tracking_server, tmp_path) == []  # no password in any file it wrote


def test_an_offline_node_that_fails_keeps_its_run(tmp_path: Path, shared_cache: Path) -> None:
    # diverged at step 5, before its first checkpoint: the node's folder (and its own store)
    # goes so that the next run starts it afresh; its FAILED run is in the folder's store
    poison = "trainer.callbacks=[{_target_:tests.faults.PoisonAt,step:5}]"
    overrides = ["preset=smoke", ONE_VARIANT, f"paths.output_dir={tmp_path}",
                 f"paths.cache_dir={shared_cache}", "tracking.mode=offline", poison,
                 "pipeline.targets=[pretrain]"]  # fmt: skip
    assert pipeline_main(["run", *overrides]) == 1
    assert not list((tmp_path / "pipeline" / "nodes").rglob("mlflow.db"))  # its folder went
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("ssmax-repro")
    runs = {r.info.run_name: r.info.status for r in runs_in_order(client, exp.experiment_id)}
    assert runs["pretrain/a_softmax/seed0"] == "FAILED"
