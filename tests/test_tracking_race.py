"""Writes that create a row if it is missing, made by many processes at the same moment on one
store, as nodes side by side make them (issue 45: two local workers logging the same dataset
inputs failed `make reproduce-all` on a fresh clone). Each round releases WORKERS processes
through a barrier onto each write; no sleeps, no timing windows: the barrier is the race.

Measured on the code before ssmax.tracking.client (plain MlflowClient, the same worker):
see docs/pipeline.md, "One store, many writers"."""

from __future__ import annotations

import importlib
import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ssmax.tracking.client import Client, lost_race
from ssmax.tracking.store import default_store
from ssmax.tracking.ui import start_ui, stop_ui

WORKERS = 8
ROUNDS = 6
OPS = ("experiment", "dataset", "experiment tag", "run tag", "registered model",
       "model version", "alias", "logged model tag")  # fmt: skip


def race_worker(k: int, uri: str, client_path: str, barrier: Any, out: Any) -> None:
    """Worker k: each round, every write of OPS at the same moment as the others; its report
    (or what ended it) goes to out."""
    try:
        out.put(_race(k, uri, client_path, barrier))
    except BaseException as err:  # the parent fails the test with it, never waits for it
        barrier.abort()
        out.put({"k": k, "fatal": f"{type(err).__name__}: {err}"})


def _race(k: int, uri: str, client_path: str, barrier: Any) -> dict[str, Any]:
    from mlflow.entities import Dataset, DatasetInput, InputTag

    module, _, name = client_path.partition(":")
    client = getattr(importlib.import_module(module), name)(uri)
    report: dict[str, Any] = {"k": k, "errors": [], "experiments": [], "runs": [], "versions": []}

    def step(op: str, r: int, write: Any, *args: Any, **kwargs: Any) -> Any:
        barrier.wait()
        try:
            return write(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - every failure is the test's finding
            report["errors"].append((op, r, f"{type(err).__name__}: {str(err)[:200]}"))
            return None

    for r in range(ROUNDS):
        exp = step("experiment", r, client.create_experiment, f"race-{r}")
        exp = exp or client.get_experiment_by_name(f"race-{r}").experiment_id
        run = client.create_run(exp).info.run_id
        if k == 0:  # one run and one logged model every worker writes to
            client.create_run(exp, run_name="shared")
            client.create_logged_model(exp, "shared")
        data = Dataset(name="corpus", digest=f"d{r}", source_type="local", source="file:///c")
        inputs = [DatasetInput(data, tags=[InputTag("mlflow.data.context", "train")])]
        step("dataset", r, client.log_inputs, run, datasets=inputs)
        step("experiment tag", r, client.set_experiment_tag, exp, "kind", "race")
        shared = client.search_runs([exp], "attributes.run_name = 'shared'")[0].info.run_id
        step("run tag", r, client.set_tag, shared, "seen", "yes")
        model = f"m-{r}"
        step("registered model", r, client.create_registered_model, model)
        made = step("model version", r, client.create_model_version, model, f"runs:/{run}/m", run)
        version = made.version if made is not None else None
        if version is not None:
            report["versions"].append((model, int(version)))
        step("alias", r, client.set_registered_model_alias, model, "newest", version or "1")
        logged = client.search_logged_models([exp], filter_string="name = 'shared'")[0]
        step("logged model tag", r, client.set_logged_model_tags, logged.model_id, {"seen": "y"})
        report["experiments"].append(exp)
        report["runs"].append(run)
    return report


def race(uri: str, client_path: str = "ssmax.tracking.client:Client") -> list[dict]:
    """WORKERS processes racing through ROUNDS rounds on uri; each one's report. They are
    forked by one fresh interpreter (`launch`), which imports MLflow once for all of them."""
    spawn = multiprocessing.get_context("spawn")
    out = spawn.Queue()
    launcher = spawn.Process(target=launch, args=(uri, client_path, out))
    launcher.start()
    reports = [out.get(timeout=600) for _ in range(WORKERS)]
    assert [one["fatal"] for one in reports if "fatal" in one] == []
    launcher.join(timeout=60)
    assert launcher.exitcode == 0  # every racer exited 0 (launch)
    return sorted(reports, key=lambda one: one["k"])


def launch(uri: str, client_path: str, out: Any) -> None:
    """The racers, forked from here: a spawned interpreter with one thread and no store open
    (each racer opens its own after the fork), MLflow imported (with this module) once."""
    import mlflow.entities  # noqa: F401 - what _race imports, before the forks

    fork = multiprocessing.get_context("fork")
    barrier = fork.Barrier(WORKERS, timeout=120)
    procs = [fork.Process(target=race_worker, args=(k, uri, client_path, barrier, out))
             for k in range(WORKERS)]  # fmt: skip
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
    codes = [p.exitcode for p in procs]
    if codes != [0] * WORKERS:
        raise SystemExit(f"racers' exit codes: {codes}")


def assert_each_written_once(reports: list[dict], uri: str, db: Path) -> None:
    assert [e for one in reports for e in one["errors"]] == []
    client = Client(uri)
    for r in range(ROUNDS):
        ids = {one["experiments"][r] for one in reports}
        assert ids == {client.get_experiment_by_name(f"race-{r}").experiment_id}
        exp = ids.pop()
        assert client.get_experiment(exp).tags["kind"] == "race"
        for one in reports:  # one dataset input a run, whoever wrote the dataset
            inputs = client.get_run(one["runs"][r]).inputs.dataset_inputs
            assert [(i.dataset.name, i.dataset.digest) for i in inputs] == [("corpus", f"d{r}")]
        with sqlite3.connect(db) as con:  # the dataset itself once in the experiment
            (count,) = con.execute("select count(*) from datasets where experiment_id = ? and "
                                   "digest = ?", (int(exp), f"d{r}")).fetchone()  # fmt: skip
        assert count == 1
        shared = client.search_runs([exp], "attributes.run_name = 'shared'")
        assert [s.data.tags.get("seen") for s in shared] == ["yes"]
        model = f"m-{r}"
        numbers = sorted(v for one in reports for m, v in one["versions"] if m == model)
        assert numbers == list(range(1, WORKERS + 1))  # each writer its own number, none lost
        held = client.search_model_versions(f"name = '{model}'")
        assert sorted(int(v.version) for v in held) == numbers
        assert int(client.get_model_version_by_alias(model, "newest").version) in numbers
        logged = client.search_logged_models([exp], filter_string="name = 'shared'")
        assert [m.tags.get("seen") for m in logged] == ["y"]


@pytest.mark.slow
def test_sqlite_store_race(tmp_path: Path) -> None:
    uri = default_store(tmp_path)
    Client(uri).search_experiments()  # the store made before the race (as ensure_experiment does)
    assert_each_written_once(race(uri), uri, tmp_path / "mlflow.db")


@pytest.mark.slow
def test_tracking_server_race(tmp_path: Path) -> None:
    server = start_ui(tmp_path)
    try:
        reports = race(server.url)
        assert_each_written_once(reports, server.url, tmp_path / "mlflow.db")
    finally:
        stop_ui(server)


def test_every_client_is_the_project_s() -> None:
    """One place every write goes through: no module makes MLflow's plain client itself."""
    src = Path(__file__).resolve().parents[1] / "src" / "ssmax"
    makers = [
        str(f.relative_to(src)) for f in src.rglob("*.py") if "import MlflowClient" in f.read_text()
    ]
    assert makers == ["tracking/client.py"]


def test_lost_race_is_read_from_the_cause() -> None:
    """What the stores say when another writer took the key, and what they say otherwise."""
    from mlflow.exceptions import MlflowException

    try:
        try:
            raise sqlite3.IntegrityError("UNIQUE constraint failed: datasets.name")
        except sqlite3.IntegrityError as err:
            raise MlflowException("(sqlite3.IntegrityError)", "BAD_REQUEST") from err
    except MlflowException as err:
        assert lost_race(err)
    assert lost_race(MlflowException('duplicate key value violates unique constraint "x"'))
    assert not lost_race(MlflowException("Run 'x' not found", "RESOURCE_DOES_NOT_EXIST"))
    assert not lost_race(MlflowException("database is locked", "TEMPORARILY_UNAVAILABLE"))
