"""The manifest that reproduces a run (ssmax.tracking.manifest): the pipeline's run and every
node's carry it in MLflow, done records keep the package set, a dirty work tree gives its diff,
`make report` shows it and `plan` names nodes of another package set. A real sqlite MLflow
store and the session's smoke pipeline (conftest); the dirty tree is a git repository made here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from mlflow import MlflowClient

from ssmax.pipeline.__main__ import main
from ssmax.pipeline.run import plan
from ssmax.pipeline.stage_code import no_result
from ssmax.pipeline.state import node_dir, read_pipeline_run
from ssmax.report.__main__ import main as report_main
from ssmax.tracking.manifest import (
    NODE_KEYS,
    PIPELINE_TAGS,
    git_state,
    log_manifest,
    packages,
    packages_sha,
    slurm_tags,
)
from ssmax.tracking.store import tracking_uri
from tests.conftest import first_pipeline_run, modules_after

OTHER_SHA = "0123456789ab"  # a package set no environment here has


def test_the_manifest_is_cheap_to_import_and_shapes_no_result() -> None:
    # plan imports it for packages_sha: torch (seconds) only where a run starts
    loaded = modules_after("import ssmax.tracking.manifest")
    assert "ssmax.tracking.manifest" in loaded and "torch" not in loaded
    assert no_result("tracking/manifest.py")  # it only logs: no fingerprint holds it


def test_packages_are_sorted_pins_and_their_hash_is_stable() -> None:
    found = packages()
    assert found == sorted(found, key=str.lower) and len(found) == len(set(found))
    assert all(re.fullmatch(r"[^=\s]+==\S+", line) for line in found)
    names = {line.split("==")[0].lower() for line in found}
    assert {"torch", "mlflow", "omegaconf"} <= names
    assert re.fullmatch(r"[0-9a-f]{12}", packages_sha()) and packages_sha() == packages_sha()


def test_packages_are_what_is_installed_not_what_is_on_sys_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # importing setuptools puts its vendored copies on sys.path: the list and its hash must
    # not depend on what a process imported (CI: the pipeline's list differed from the test's)
    before = packages()
    dist = tmp_path / "phantom_pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: phantom-pkg\nVersion: 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert packages() == before and "phantom-pkg==1.0" not in packages()


def test_slurm_job_of_a_node(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(key, raising=False)
    assert slurm_tags() == {}  # outside SLURM: no tag at all
    monkeypatch.setenv("SLURM_JOB_ID", "4711")
    assert slurm_tags() == {"slurm_job_id": "4711"}
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "4700")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "11")
    assert slurm_tags() == {"slurm_job_id": "4711", "slurm_array_task": "4700_11"}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True,
                          timeout=60).stdout  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one committed file."""
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "test@example.com")
    _git(root, "config", "user.name", "test")
    (root / "train.py").write_text("lr = 0.001\n")
    _git(root, "add", "train.py")
    _git(root, "commit", "-q", "-m", "first")
    return root


def _store(tmp_path: Path) -> tuple[MlflowClient, str]:
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    return client, client.create_experiment("manifest", (tmp_path / "art").as_uri())


def test_a_dirty_work_tree_gives_its_diff(repo: Path, tmp_path: Path) -> None:
    commit = _git(repo, "rev-parse", "HEAD").strip()
    clean = git_state(repo)
    assert clean == {"commit": commit, "dirty": False, "diff": "", "untracked": []}
    client, experiment = _store(tmp_path)
    run = client.create_run(experiment).info.run_id
    log_manifest(client, run, cwd=repo)
    tags = client.get_run(run).data.tags
    assert tags["dirty"] == "false" and tags["packages_sha"] == packages_sha()
    names = {a.path for a in client.list_artifacts(run, "manifest")}
    assert names == {"manifest/packages.txt", "manifest/manifest.json"}  # no diff: clean

    (repo / "train.py").write_text("lr = 0.002\n")  # a change and a new file (subfolder too)
    (repo / "sub").mkdir()
    (repo / "sub" / "new_module.py").write_text("x = 1\n")
    dirty = git_state(repo / "sub")  # from a subfolder: the whole tree's state
    assert dirty["dirty"] is True and dirty["untracked"] == ["sub/new_module.py"]
    assert "-lr = 0.001\n+lr = 0.002" in dirty["diff"] and "sub/new_module.py" in dirty["diff"]
    run = client.create_run(experiment).info.run_id
    log_manifest(client, run, cwd=repo)
    assert client.get_run(run).data.tags["dirty"] == "true"
    diff = Path(client.download_artifacts(run, "manifest/git.diff", str(tmp_path / "dl")))
    assert diff.read_text() == dirty["diff"]
    summary_file = client.download_artifacts(run, "manifest/manifest.json", str(tmp_path / "dl"))
    summary = json.loads(Path(summary_file).read_text())
    assert summary["git"] == {"commit": commit, "dirty": True, "untracked": ["sub/new_module.py"]}
    assert summary["packages_sha"] == packages_sha() and summary["host"] == socket.gethostname()
    assert {"python", "torch", "cuda", "cudnn", "nccl", "gpus", "cpu", "platform"} <= set(summary)
    outside = tmp_path / "plain"  # not a repository: nothing to say about a work tree
    outside.mkdir()
    assert git_state(outside) == {"commit": "unknown", "dirty": None, "diff": "", "untracked": []}


@pytest.mark.slow
def test_pipeline_and_node_runs_carry_the_manifest(
    smoke_pipeline: list[str], tmp_path: Path
) -> None:
    cfg, jobs = plan(smoke_pipeline)
    client, parent = first_pipeline_run(cfg)
    tags = parent.data.tags
    assert set(PIPELINE_TAGS) <= set(tags) and tags["packages_sha"] == packages_sha()
    assert tags["dirty"] in ("true", "false") and tags["host"] == socket.gethostname()
    assert tags["python"] and tags["torch"] and tags["cpu"]
    run_id = parent.info.run_id
    names = {a.path for a in client.list_artifacts(run_id, "manifest")}
    expected = {"manifest/packages.txt", "manifest/manifest.json"}
    assert names == expected | ({"manifest/git.diff"} if tags["dirty"] == "true" else set())
    listed = Path(client.download_artifacts(run_id, "manifest/packages.txt", str(tmp_path)))
    assert listed.read_text().splitlines() == packages()
    children = client.search_runs([parent.info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{run_id}'")  # fmt: skip
    assert len(children) == len(jobs)
    for child in children:  # training and eval nodes alike
        node = child.data.tags
        assert {k: node[k] for k in NODE_KEYS} == {k: tags[k] for k in NODE_KEYS}, node["node"]
        assert ("slurm_job_id" in node) == ("SLURM_JOB_ID" in os.environ)
        config = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert "config.yaml" in config, node["node"]
    for job in jobs:  # the done records keep what made them
        assert job.done["packages_sha"] == packages_sha()
        assert job.done["host"] == tags["host"] and job.done["git_commit"] == tags["git_commit"]


@pytest.mark.slow
def test_cached_nodes_say_what_made_them(smoke_pipeline_held: list[str]) -> None:
    # a second run finds every node cached: their runs carry the done record's manifest (the
    # run that made them), not this process's, and their config
    cfg, jobs = plan(smoke_pipeline_held)
    records = {job.name: job.done for job in jobs}
    assert main(["run", *smoke_pipeline_held]) == 0
    client = MlflowClient(tracking_uri(cfg))
    run_id = read_pipeline_run(cfg.paths.output_dir)["run_id"]
    parent = client.get_run(run_id)
    children = client.search_runs([parent.info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{run_id}'")  # fmt: skip
    assert len(children) == len(jobs)
    for child in children:
        tags, record = child.data.tags, records[child.data.tags["node"]]
        assert tags["cached"] == "true"
        assert {k: tags[k] for k in NODE_KEYS} == {k: record[k] for k in NODE_KEYS}
        assert tags["git_commit"] == record["git_commit"]
        assert "config.yaml" in {a.path for a in client.list_artifacts(child.info.run_id)}


def _copy_folder(source: Path, dest: Path) -> None:
    """What plan and the report read of a pipeline's folder: the done records, the node
    configs, its pipeline run's record and the MLflow store (files the nodes wrote, figures'
    numbers, stay where they are: the records name them)."""
    for path in (source / "pipeline").rglob("*"):
        if path.name in ("done.json", "config.yaml", "mlflow_run.json"):
            target = dest / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    shutil.copy2(source / "mlflow.db", dest / "mlflow.db")


@pytest.mark.slow
def test_plan_and_report_name_nodes_of_another_package_set(
    smoke_pipeline_held: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # held: the folder's latest pipeline run is whole while the store is copied
    cfg, jobs = plan(smoke_pipeline_held)
    source, copy = Path(cfg.paths.output_dir), tmp_path / "out"
    _copy_folder(source, copy)
    overrides = [o for o in smoke_pipeline_held if not o.startswith("paths.output_dir=")]
    overrides.append(f"paths.output_dir={copy}")
    assert main(["plan", *overrides]) == 0
    out = capsys.readouterr().out
    assert f"{len(jobs)} nodes: {len(jobs)} cached" in out and "package set" not in out

    # the report: commit, work tree, hosts, CPUs, GPUs; one package set
    parent = MlflowClient(tracking_uri(cfg)).get_run(read_pipeline_run(copy)["run_id"])
    tags = parent.data.tags
    assert report_main(["--output-dir", str(copy), "--dest", str(tmp_path / "r1")]) == 0
    md = (tmp_path / "r1" / "report.md").read_text()
    section = md[md.index("## Manifest") : md.index("## Results per variant")]
    assert f"- commit: {tags['git_commit']}; work tree: " in section
    assert ("**Warning:** the pipeline ran from a work tree with uncommitted changes" in
            section) == (tags["dirty"] == "true")  # fmt: skip
    assert re.search(rf"- hosts: {re.escape(socket.gethostname())} \(\d+ nodes\)", section)
    assert f"- CPUs: {tags['cpu']} (" in section and f"- GPUs: {tags['gpus']} (" in section
    assert "different package sets" not in section
    assert "<h2>Manifest</h2>" in (tmp_path / "r1" / "report.html").read_text()

    # two nodes ran with another package set: their done records and their runs say so
    client = MlflowClient(f"sqlite:///{copy / 'mlflow.db'}")
    children = client.search_runs([parent.info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{parent.info.run_id}'")  # fmt: skip
    changed = sorted(children, key=lambda r: r.data.tags["node"])[:2]
    for child in changed:
        node = child.data.tags
        done = node_dir(copy, node["node"], node["fingerprint"]) / "done.json"
        record = json.loads(done.read_text())
        done.write_text(json.dumps(record | {"packages_sha": OTHER_SHA}))
        client.set_tag(child.info.run_id, "packages_sha", OTHER_SHA)
    assert main(["plan", *overrides]) == 0
    out = capsys.readouterr().out
    assert f"{len(jobs)} nodes: {len(jobs)} cached" in out  # reused all the same
    line = next(x for x in out.splitlines() if x.startswith("packages: "))
    assert line.startswith("packages: 2 cached nodes ran with another package set")
    assert f"packages_sha {OTHER_SHA} (2)" in line and packages_sha() in line
    assert report_main(["--output-dir", str(copy), "--dest", str(tmp_path / "r2")]) == 0
    md = (tmp_path / "r2" / "report.md").read_text()
    assert (f"- **Warning:** the nodes ran with 2 different package sets: {packages_sha()} "
            f"({len(children) - 2} nodes), {OTHER_SHA} (2 nodes)") in md  # fmt: skip
