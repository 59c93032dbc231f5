"""Copy what a local MLflow store holds to a tracking server, after the fact (`make sync`).

`python -m ssmax.tracking.sync --output-dir OUTPUT_DIR --tracking-uri http://HOST:PORT`

For compute nodes with no route to the server: the pipeline logs to its folder's own store
(sqlite in the output folder: no network at all; with `tracking.mode=offline` each node logs to
a store in its own folder, merged into the folder's by the same copy, `merge_nodes`), and this
copies it later from a machine that reaches the server: every experiment's runs, parents before
children (mlflow.parentRunId pointed at the copies), their params, tags, every metric step with
its own timestamp, artifacts, dataset inputs, status and times; the logged models of those runs
(MLflow 3's LoggedModel: the exported models, their files); then the registered model versions
with their tags and aliases, pointed at the copied logged models. What training runs left pending
for a server that went away mid-run (ssmax.tracking.spool) is delivered first, as the pipeline
and the report do: the same mechanism for a server that was away for part of a run and for one
never reached.

Idempotent: each copy carries SOURCE_TAG, the local run (or version) it came from. A run whose
copy carries DONE_TAG (set last, once the run has ended) is skipped, so a second sync copies
nothing; a sync killed halfway goes on where it stopped (the server keeps one copy of an
identical metric (key, value, timestamp, step), of a dataset input, of an artifact path). A run
still running here is copied as far as it got and again by the next sync. The local store is
only read.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ssmax.files.atomic import atomic_write_text
from ssmax.files.flock import exclusive
from ssmax.tracking.reach import check_reachable
from ssmax.tracking.runs import close_dead
from ssmax.tracking.spool import deliver_pending
from ssmax.tracking.store import (
    STORE_FILE,
    create_sqlite_store,
    default_store,
    is_server,
    mlflow_client,
)

SOURCE_TAG = "synced_from"  # on a copy: the local run id (a version: "<run id>/<version>")
DONE_TAG = "synced"  # on a run's copy once all of it is there
PARENT_TAG = "mlflow.parentRunId"
ENDED = ("FINISHED", "FAILED", "KILLED")
PAGE = 1000


@dataclass
class Counts:
    runs: int = 0  # runs copied (or completed) now
    skipped: int = 0  # runs whose copy was complete
    metrics: int = 0  # metric values sent
    artifacts: int = 0  # runs whose artifacts were sent
    models: int = 0  # logged models copied (or completed) now
    versions: int = 0  # registered model versions created

    def line(self, source: str, target: str) -> str:
        return (f"synced {source} -> {target}: {self.runs} runs copied, {self.skipped} already "
                f"there, {self.metrics} metric values, {self.models} logged models, "
                f"{self.versions} model versions")  # fmt: skip


def _pages(fetch: Callable[[str | None], Any]) -> Iterator[Any]:
    token = None
    while True:
        page = fetch(token)
        yield from page
        token = page.token
        if not token:
            return


def runs_in_order(client: Any, experiment_id: str) -> list[Any]:
    """The experiment's runs (deleted ones left out), every parent before its children."""
    runs = list(_pages(lambda t: client.search_runs([experiment_id], max_results=PAGE,
                                                    page_token=t)))  # fmt: skip
    by_id = {r.info.run_id: r for r in runs}

    def depth(run: Any) -> int:
        parent = run.data.tags.get(PARENT_TAG)
        return 1 + depth(by_id[parent]) if parent in by_id else 0

    return sorted(runs, key=lambda r: (depth(r), r.info.start_time or 0))


class Sync:
    """One copy of a source store into a target; ids maps source run ids to their copies."""

    def __init__(self, source: str, target: str, artifact_location: str | None = None) -> None:
        self.src, self.dst = mlflow_client(source), mlflow_client(target)
        self.source, self.target = source, target
        self.artifact_location = artifact_location  # a new experiment's (a server: its own)
        self.ids: dict[str, str] = {}
        self.model_ids: dict[str, str] = {}  # source LoggedModel id -> its copy's
        self.counts = Counts()

    def experiment(self, exp: Any) -> str:
        """The target's experiment of the same name (created with the source's tags)."""
        found = self.dst.get_experiment_by_name(exp.name)
        if found is not None:
            return found.experiment_id
        return self.dst.create_experiment(exp.name, self.artifact_location, tags=dict(exp.tags))

    def copy_of(self, experiment_id: str, run: Any) -> Any | None:
        """The target's copy of run, if an earlier sync made one; a run tagged as its copy
        with another name is another run: one line, nothing written."""
        query = f"tags.{SOURCE_TAG} = '{run.info.run_id}'"
        found = self.dst.search_runs([experiment_id], query, max_results=2)
        if not found:
            return None
        copy = found[0]
        if len(found) > 1 or copy.info.run_name != run.info.run_name:
            raise SyncError(
                f"the server's run {copy.info.run_id} ({copy.info.run_name}) says it is a copy of "
                f"{run.info.run_id}, which is {run.info.run_name}: another run under the same "
                "id; sync into another experiment or server"
            )
        return copy

    def run(self, experiment_id: str, run: Any) -> None:
        rid = run.info.run_id
        copy = self.copy_of(experiment_id, run)
        if copy is not None and copy.data.tags.get(DONE_TAG) == "true":
            self.ids[rid] = copy.info.run_id
            self.counts.skipped += 1
            return
        tags = {k: v for k, v in run.data.tags.items() if k not in (PARENT_TAG, DONE_TAG)}
        tags[SOURCE_TAG] = rid
        parent = run.data.tags.get(PARENT_TAG)
        if parent:  # a parent synced before, or one already on the server (an online run)
            tags[PARENT_TAG] = self.ids.get(parent, parent)
        if copy is None:
            copy = self.dst.create_run(experiment_id, start_time=run.info.start_time,
                                       tags=tags, run_name=run.info.run_name)  # fmt: skip
        dst = self.ids[rid] = copy.info.run_id
        self.log(dst, run, tags)
        if run.info.status in ENDED:
            self.dst.set_terminated(dst, run.info.status, end_time=run.info.end_time)
            self.dst.set_tag(dst, DONE_TAG, "true")
        self.counts.runs += 1

    def log(self, dst: str, run: Any, tags: dict[str, str]) -> None:
        """Params, tags, metrics the copy lacks, dataset inputs, artifacts."""
        from mlflow.entities import Param, RunTag

        params = [Param(k, v) for k, v in run.data.params.items()]
        for i in range(0, len(params), 100):
            self.dst.log_batch(dst, params=params[i : i + 100])
        items = [RunTag(k, v) for k, v in tags.items()]
        for i in range(0, len(items), 100):
            self.dst.log_batch(dst, tags=items[i : i + 100])
        for key in run.data.metrics:
            history = self.src.get_metric_history(run.info.run_id, key)
            if len(self.dst.get_metric_history(dst, key)) >= len(history):
                continue  # all there (the server keeps one copy of each identical value)
            for i in range(0, len(history), PAGE):
                self.dst.log_batch(dst, metrics=history[i : i + PAGE])
            self.counts.metrics += len(history)
        if run.inputs and run.inputs.dataset_inputs:
            self.dst.log_inputs(dst, datasets=list(run.inputs.dataset_inputs))
        if self.src.list_artifacts(run.info.run_id):
            with tempfile.TemporaryDirectory() as tmp:
                local = self.src.download_artifacts(run.info.run_id, "", tmp)
                self.dst.log_artifacts(dst, local)
            self.counts.artifacts += 1

    def logged_models(self, source_experiment: str, experiment_id: str) -> None:
        """The logged models of the copied runs: one copy each (found again by its run and
        name), its files sent and it made READY last; a copy left PENDING by a sync killed
        halfway gets its files again."""
        from mlflow.artifacts import download_artifacts
        from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

        for model in _pages(lambda t: self.src.search_logged_models([source_experiment],
                                                                    page_token=t)):  # fmt: skip
            run_id = self.ids.get(model.source_run_id or "")
            if run_id is None or str(model.status) != "READY":
                continue
            query = f"source_run_id = '{run_id}' AND name = '{model.name}'"
            found = self.dst.search_logged_models([experiment_id], filter_string=query)
            if found:
                copy = found[0]
            else:
                tags = {k: v for k, v in model.tags.items() if k != MLFLOW_MODEL_VERSIONS}
                copy = self.dst.create_logged_model(
                    experiment_id, model.name, run_id, tags=tags | {SOURCE_TAG: model.model_id},
                    params=model.params, model_type=model.model_type,
                )  # fmt: skip
            self.model_ids[model.model_id] = copy.model_id
            if str(copy.status) == "READY":
                continue
            with tempfile.TemporaryDirectory() as tmp:
                local = download_artifacts(artifact_uri=model.artifact_location, dst_path=tmp,
                                           tracking_uri=self.source)  # fmt: skip
                self.dst.log_model_artifacts(copy.model_id, local)
            self.dst.finalize_logged_model(copy.model_id, "READY")
            self.counts.models += 1

    def models(self) -> None:
        """Registered models and versions of copied runs, with their tags and aliases."""
        # lazy: tracking.models is in the export stage's code (its result), not the report's;
        # the report stage imports this module (NO_RESULT: stage_code does not follow it), so at
        # the top importing that stage would load models outside its code (test_stage_reads)
        from ssmax.tracking.models import logged_model_id, register_version

        for model in _pages(lambda t: self.src.search_registered_models(page_token=t)):
            self.dst.create_registered_model(model.name, dict(model.tags), model.description)
            query = f"name = '{model.name}'"
            there = {v.tags.get(SOURCE_TAG): v.version
                     for v in self.dst.search_model_versions(query)}  # fmt: skip
            copies: dict[str, str] = {}
            mine = sorted(self.src.search_model_versions(query), key=lambda v: int(v.version))
            for version in mine:
                key = f"{version.run_id}/{version.version}"
                made_from = logged_model_id(version)
                copied = self.model_ids.get(made_from or "")
                if key not in there and version.run_id in self.ids and (copied or not made_from):
                    run_id = self.ids[version.run_id]
                    source = version.source.replace(version.run_id, run_id)
                    if copied:  # models:/<logged model id>
                        source = version.source.replace(made_from, copied)
                    made = register_version(
                        self.dst, self.target, model.name, source, run_id,
                        dict(version.tags) | {SOURCE_TAG: key}, copied, version.description,
                    )  # fmt: skip
                    there[key] = made.version
                    self.counts.versions += 1
                if key in there:
                    copies[str(version.version)] = there[key]
            aliases = self.src.get_registered_model(model.name).aliases  # search leaves them out
            for alias, version in (aliases or {}).items():
                if str(version) in copies:
                    self.dst.set_registered_model_alias(model.name, alias, copies[str(version)])


class SyncError(Exception):
    """Why a sync cannot go on, in one line."""


def sync(source: str, target: str, artifact_location: str | None = None) -> Counts:
    """Copy every experiment's runs of source, then its registered versions, to target."""
    job = Sync(source, target, artifact_location)
    for exp in _pages(lambda t: job.src.search_experiments(max_results=PAGE, page_token=t)):
        runs = runs_in_order(job.src, exp.experiment_id)
        if not runs:
            continue
        experiment_id = job.experiment(exp)
        for run in runs:
            job.run(experiment_id, run)
        job.logged_models(exp.experiment_id, experiment_id)
    job.models()
    return job.counts


def copy_id(client: Any, run_id: str) -> str | None:
    """The id of the run copied from run_id in client's store (any experiment), or None."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    found = client.search_runs(experiments, f"tags.{SOURCE_TAG} = '{run_id}'", max_results=1)
    return found[0].info.run_id if found else None


def merge_nodes(output_dir: str | Path, node: str | Path | None = None) -> int:
    """tracking.mode=offline: each node's own store (<node folder>/mlflow.db; node: that
    node's only) copied into the folder's, so that the report, `make mlflow-ui` and `make
    sync` find the whole run tree there; one process writes it at a time (a lock beside it).
    A store copied before and unchanged since is not opened again. Returns the stores copied
    now."""
    folder = Path(output_dir).resolve()
    nodes = folder / "pipeline" / "nodes"
    if node is not None:
        stores = [p for p in [Path(node).resolve() / STORE_FILE] if p.exists()]
    else:  # the newest last: its aliases win
        found = nodes.rglob(STORE_FILE) if nodes.is_dir() else []
        stores = sorted(found, key=lambda p: p.stat().st_mtime)
    target, artifacts = default_store(folder), (folder / "mlartifacts").as_uri()
    merged = 0
    with exclusive(f"{folder / STORE_FILE}.merge.lock"):
        create_sqlite_store(target, artifacts)
        for db in stores:
            mark = db.with_name(f"{STORE_FILE}.merged")
            stat = db.stat()
            stamp = f"{stat.st_size}:{stat.st_mtime_ns}"
            if mark.exists() and mark.read_text() == stamp:
                continue
            sync(f"sqlite:///{db}", target, artifacts)
            atomic_write_text(mark, stamp)
            merged += 1
    return merged


def main(argv: list[str] | None = None) -> int:
    # lazy: the report stage imports this module (merge_nodes), and what a stage's import loads
    # is in its fingerprint unless it shapes no result (tests/test_stage_reads.py)
    from ssmax.host.cli import Parser

    parser = Parser("ssmax.tracking.sync", description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default="outputs", help="the folder whose store to copy")
    parser.add_argument("--tracking-uri", required=True, help="the server: http://HOST:PORT")
    args = parser.parse_args(argv)
    output_dir = Path(args.output_dir).resolve()
    if not (output_dir / STORE_FILE).exists():
        print(f"error: no MLflow store at {output_dir / STORE_FILE}: nothing to sync (a pipeline "
              "with tracking.tracking_uri unset writes one there)", file=sys.stderr)  # fmt: skip
        return 2
    if not is_server(args.tracking_uri):
        print(f"error: --tracking-uri={args.tracking_uri}: a tracking server (http:// or "
              "https://) to copy the runs to", file=sys.stderr)  # fmt: skip
        return 2
    problem = check_reachable(args.tracking_uri, setting="--tracking-uri",
                              otherwise="sync later; the local store stays as it is")  # fmt: skip
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2

    deliver_pending(output_dir)  # metrics that runs tracked on a server left for it
    merge_nodes(output_dir)  # tracking.mode=offline: the nodes' own stores
    source = default_store(output_dir)
    closed = close_dead(source, output_dir)  # a crash's runs arrive KILLED, not running
    if closed:
        print(closed)
    try:
        counts = sync(source, args.tracking_uri)
    except SyncError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(counts.line(source, args.tracking_uri))
    return 0


if __name__ == "__main__":
    sys.exit(main())
