"""Concurrent invocations: one pipeline run per output folder (a second says who holds it, or
waits with --wait and then finds the work cached: no node runs twice), `status` reads while a
run goes on, the MLflow store is created once when several processes open it at once, and
the blocking lock (ssmax.files.flock.exclusive) waits for its holder."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from ssmax.files.flock import exclusive
from ssmax.lit.hold import held_marker
from ssmax.pipeline.__main__ import main
from ssmax.pipeline.run_lock import BUSY, lock_path, pipeline_lock
from tests.conftest import make_cfg


def test_second_run_says_who_holds_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["run", "preset=smoke", f"paths.output_dir={tmp_path}"]
    with pipeline_lock(tmp_path, command="python -m ssmax.pipeline run (the first)"):
        assert json.loads(lock_path(tmp_path).read_text())["pid"] > 0
        capsys.readouterr()
        assert main(args) == BUSY
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"busy: {tmp_path} is in use by pid ")
    assert "(python -m ssmax.pipeline run (the first))" in lines[0] and "--wait" in lines[0]
    assert lock_path(tmp_path).read_text() == ""  # released: nobody holds it
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "pipeline" / "nodes").exists()


def _open_store(out: str, barrier: object) -> None:
    from ssmax.tracking.store import ensure_experiment

    cfg = make_cfg("preset=smoke", f"paths.output_dir={out}")
    barrier.wait()  # type: ignore[attr-defined]
    ensure_experiment(cfg)


def test_store_is_created_once_by_concurrent_processes(tmp_path: Path) -> None:
    """Before the lock, the second process to create a new store failed with
    sqlite3.OperationalError: duplicate column name: step."""
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(3)
    procs = [context.Process(target=_open_store, args=(str(tmp_path), barrier)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    assert [e.name for e in client.search_experiments()].count("ssmax-repro") == 1


def _die_while_migrating(out: str) -> None:
    """ensure_experiment in a process that dies (os._exit) once MLflow has made the first
    tables of a new store and before its migrations: as a job killed in those seconds."""
    import os

    import mlflow.store.db.utils as db_utils

    from ssmax.tracking.store import ensure_experiment

    db_utils._upgrade_db = lambda engine: os._exit(9)  # the fault: death mid-creation
    ensure_experiment(make_cfg("preset=smoke", f"paths.output_dir={out}"))


def test_store_made_by_a_process_that_dies_midway_is_not_left_half_made(tmp_path: Path) -> None:
    """Made in place, a store whose creator died between its tables and its migrations (a SLURM
    time-out signal during a job's start-up) was refused by every later run: "Detected
    out-of-date database schema"."""
    dead = multiprocessing.get_context("fork").Process(target=_die_while_migrating,
                                                       args=(str(tmp_path),))  # fmt: skip
    dead.start()
    dead.join(120)
    assert dead.exitcode == 9
    assert not (tmp_path / "mlflow.db").exists()  # whole or not at all
    _open_store(str(tmp_path), threading.Barrier(1))  # the next run: a store as if none had been
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    assert [e.name for e in client.search_experiments()].count("ssmax-repro") == 1


def _wait_for(what: str, check, deadline_s: float = 300) -> None:  # noqa: ANN001
    end = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < end, f"timed out after {deadline_s:.0f} s waiting for {what}"
        time.sleep(0.1)


@pytest.mark.slow
def test_two_runs_at_once_one_runs_the_other_waits(tmp_path: Path, shared_cache: Path) -> None:
    # The first run's training waits at step 1 until the test releases it, so the second and
    # third runs meet it mid-run however fast the machine is (trainer.callbacks is not part of
    # a fingerprint: the three runs plan the same nodes).
    release = tmp_path / "release"
    hold = f"{{_target_: ssmax.lit.hold.HoldAtStep, step: 1, release: '{release}'}}"
    settings = ["preset=smoke", "pipeline.variants=[pn_rationale]", f"paths.output_dir={tmp_path}",
                f"paths.cache_dir={shared_cache}", f"trainer.callbacks=[{hold}]"]  # fmt: skip
    command = [sys.executable, "-m", "ssmax.pipeline"]
    first = subprocess.Popen([*command, "run", *settings], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    _wait_for(
        "the first run to hold", lambda: any(tmp_path.glob(f"pipeline/**/{held_marker('', 1)}"))
    )
    assert json.loads(lock_path(tmp_path).read_text())["pid"] == first.pid
    third = subprocess.Popen([*command, "run", *settings, "--wait"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    third_lines: list[str] = []
    reader = threading.Thread(target=lambda: third_lines.extend(third.stdout), daemon=True)
    reader.start()
    second = subprocess.run([*command, "run", *settings], capture_output=True, text=True)
    assert second.returncode == BUSY
    assert second.stderr.strip().splitlines() == [
        line for line in second.stderr.splitlines() if line.startswith(f"busy: {tmp_path}")
    ]  # one line
    assert f"pid {first.pid}" in second.stderr
    status = subprocess.run([*command, "status", *settings], capture_output=True, text=True)
    assert status.returncode == 0 and "nodes:" in status.stdout  # reads while the run goes on
    _wait_for("the third run to wait", lambda: any("waiting for" in x for x in third_lines))
    release.touch()
    out, err = first.communicate(timeout=600)
    third.wait(timeout=600)
    reader.join(timeout=60)
    third_out, third_err = "".join(third_lines), third.stderr.read()
    assert first.returncode == 0, err[-2000:]
    assert third.returncode == 0, third_err[-2000:]
    assert f"waiting for pid {first.pid}" in third_out
    nodes = out.count("done    ")
    assert nodes > 0 and f"{nodes} nodes: {nodes} cached" in third_out  # nothing twice

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")  # the store is intact
    experiment = client.get_experiment_by_name("ssmax-repro")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    worked = [r for r in runs if "node" in r.data.tags and "cached" not in r.data.tags]
    names = [r.data.tags["node"] for r in worked]
    assert len(names) == len(set(names)) == nodes  # each node ran once
    pipelines = [r for r in runs if r.data.tags.get("kind") == "pipeline"]
    assert sorted(r.info.status for r in pipelines) == ["FINISHED", "FINISHED"]


# The holder: a fresh interpreter that imports the lock alone (a spawned Process imported
# this module, MLflow and Lightning with it: ~6 s of CPU to hold a lock for half a second).
HOLD = """import sys, time
from ssmax.files.flock import exclusive
lock, log, held = sys.argv[1:]
with exclusive(lock):
    open(held, "w").close()
    time.sleep(0.5)
    with open(log, "a") as f:
        f.write("holder done\\n")
"""


def test_exclusive_waits_for_the_holder_in_another_process(tmp_path: Path) -> None:
    lock, log, held = tmp_path / "sub" / "x.lock", tmp_path / "log", tmp_path / "held"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock), str(log), str(held)])
    deadline = time.monotonic() + 60
    while not held.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert held.exists()
    # blocks until the holder has written its line and let go
    with exclusive(lock), open(log, "a") as f:
        f.write("second\n")
    assert holder.wait(60) == 0
    assert log.read_text().splitlines() == ["holder done", "second"]


def test_an_experiment_made_before_its_kind_gets_it(tmp_path: Path) -> None:
    """An experiment of an older store (no mlflow.experimentKind) is given the model-training
    kind when a run opens it; the UI's sidebar link then says so (the browser test)."""
    from ssmax.tracking.store import (
        EXPERIMENT_KIND,
        create_sqlite_store,
        ensure_experiment,
        tracking_uri,
    )
    from ssmax.tracking.ui import only_experiment

    cfg = make_cfg("preset=smoke", f"paths.output_dir={tmp_path}")
    uri = tracking_uri(cfg)
    create_sqlite_store(uri, None)
    old = MlflowClient(uri).create_experiment(cfg.tracking.experiment)
    assert "mlflow.experimentKind" not in MlflowClient(uri).get_experiment(old).tags
    assert ensure_experiment(cfg) == old == only_experiment(tmp_path)
    tags = MlflowClient(uri).get_experiment(old).tags
    assert {k: tags[k] for k in EXPERIMENT_KIND} == EXPERIMENT_KIND


def _tables(db: Path) -> dict[str, object]:
    """A sqlite store's schema (each statement's lines as a set: MLflow's migrations order a
    table's constraints differently from one process to the next) and its rows."""
    import sqlite3

    with sqlite3.connect(db) as con:
        schema = {name: set((sql or "").splitlines())
                  for name, sql in con.execute("select name, sql from sqlite_master")}  # fmt: skip
        tables = [n for (n,) in con.execute("select name from sqlite_master where type='table'")]
        rows = {t: sorted(map(str, con.execute(f"select * from {t}"))) for t in tables}
    return {"schema": schema, "rows": rows}


def test_a_store_copied_from_the_empty_one_equals_one_made_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a cache folder, a new store is a copy of MLflow's empty schema, migrated once (not
    for each store: ~1 s of CPU each), and equals a store made in place: the same tables at
    the same schema version, the same Default experiment (its own artifact folder, its time)."""
    import mlflow.store.db.utils as db_utils

    from ssmax.tracking.store import create_sqlite_store, empty_store

    migrations = []
    upgrade = db_utils._upgrade_db
    monkeypatch.setattr(db_utils, "_upgrade_db", lambda e: migrations.append(1) or upgrade(e))
    cache, art = tmp_path / "cache", tmp_path / "art"
    made = {}
    for name, folder in [("in place", None), ("first copy", cache), ("second copy", cache)]:
        db = tmp_path / name / "mlflow.db"
        create_sqlite_store(f"sqlite:///{db}", art.as_uri(), folder)
        made[name] = _tables(db)
    assert len(migrations) == 2  # in place, and the empty store once; no copy migrated
    assert empty_store(cache).name.startswith("empty-") and len(migrations) == 2
    for name in ("first copy", "second copy"):
        assert made[name]["schema"] == made["in place"]["schema"]
        rows, place = made[name]["rows"], made["in place"]["rows"]
        assert rows.keys() == place.keys() and rows["alembic_version"] == place["alembic_version"]
        assert [r.split(", ")[:4] for r in rows["experiments"]] == [
            r.split(", ")[:4] for r in place["experiments"]] == [
            ["(0", "'Default'", f"'{art.as_uri()}/0'", "'active'"]]  # fmt: skip
        assert {t: v for t, v in rows.items() if t != "experiments"} == {
            t: v for t, v in place.items() if t != "experiments"}  # fmt: skip
