"""A crash loses nothing (issue 44, item 2): a smoke pipeline (pretraining, SFT, its RoPE node,
an eval and an export) SIGKILLed at points a fixed seed picks, started again after each kill,
then run to the end, equals an uninterrupted run: the same node outputs, the same weights and
files, one FINISHED MLflow run for every node under the last pipeline run, none left RUNNING,
and no temporary file of an atomic write in any node folder.

The kills come from hooks, not timers. The pipeline starts with a sitecustomize.py (written
here, on its PYTHONPATH; the forkserver and its workers inherit it) that SIGKILLs a process
when it is about to rename the K-th file matching a pattern into place (an atomic write's last
act: ssmax.files.atomic), or has just opened such a file for writing in place (a write that is not
atomic). A kill in the pipeline process takes its whole process group (the forkserver, a
worker), as a lost machine would; a kill in a worker takes the worker alone, and the pipeline
goes on and reports it failed. A training node is also killed mid-step (tests.faults.KillAt).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import runpy
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ssmax.tracking.store import default_store

ROOT = Path(__file__).resolve().parents[1]
SEED = 44  # picks the step of the mid-step kill and which checkpoint and export folder
COMMON = ["preset=smoke", "pipeline.variants=[a_softmax]", "pipeline.targets=[eval_niah,export]"]
WORKERS = "executor.workers=1"  # local: one worker, the same order every time

# Written as <tmp>/hooks/sitecustomize.py. SSMAX_CRASH: a list of kills, each {"role":
# "pipeline" | "worker", "match": fnmatch patterns of the target's path, "nth": K, "count": a
# file counting its events, "log": the file that records the kill}.
HOOK = """
import fcntl, fnmatch, json, os, signal, sys

_kills = json.loads(os.environ.get("SSMAX_CRASH") or "[]")


def _role():
    main = getattr(sys.modules.get("__main__"), "__spec__", None)
    return "pipeline" if main is not None and main.name == "ssmax.pipeline.__main__" else "worker"


def _event(kind, path):
    path = os.path.abspath(os.fsdecode(os.fspath(path)))
    for kill in _kills:
        if _role() == kill["role"] and any(fnmatch.fnmatch(path, m) for m in kill["match"]):
            _count(kill, kind, path)


def _count(kill, kind, path):
    with _open(kill["count"], "a+") as count:
        fcntl.flock(count, fcntl.LOCK_EX)
        count.seek(0)
        n = len(count.read()) + 1
        count.write("x")
        count.flush()
        if n != kill["nth"]:
            return
        with _open(kill["log"], "a") as log:
            log.write(json.dumps({"role": kill["role"], "pid": os.getpid(), "kind": kind,
                                  "path": path}) + "\\n")
    if kill["role"] == "pipeline":  # the whole tree at once, as a lost machine
        os.killpg(0, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


_replace, _rename, _open = os.replace, os.rename, open
if _kills:

    def replace(src, dst, *args, **kwargs):
        _event("rename", dst)
        return _replace(src, dst, *args, **kwargs)

    def rename(src, dst, *args, **kwargs):
        _event("rename", dst)
        return _rename(src, dst, *args, **kwargs)

    def open_(file, mode="r", *args, **kwargs):
        handle = _open(file, mode, *args, **kwargs)
        if isinstance(file, (str, bytes, os.PathLike)) and set(mode) & set("wxa+"):
            _event("open", file)  # opened to write in place: a kill now leaves it partial
        return handle

    import builtins, io

    os.replace, os.rename, builtins.open, io.open = replace, rename, open_, open_
"""


def schedule(seed: int) -> list[tuple[str, list[dict[str, Any]]]]:
    """The pipeline runs that crash, in the order the pipeline reaches their kills (each is
    reached in the run after the previous one): the executor and the kills of each, what is
    killed, where (fnmatch patterns of the written file's path) and which matching event of
    that run (K). Two kills in one run: the workers of two independent nodes, the pipeline
    going on after the first. The seed picks the step and which file of each kind."""
    rng = random.Random(seed)
    nodes = "*/pipeline/nodes"
    pretrain, sft = f"{nodes}/pretrain/*", f"{nodes}/sft/*"
    return [
        ("local", [{"what": "pretrain's worker mid-step, after its first checkpoint",
                    "kill_at": rng.randint(11, 19)}]),
        ("local", [{"what": "pretrain's worker writing its weights or its done record",
                    "role": "worker", "match": [f"{pretrain}/model.pt", f"{pretrain}/done.json"],
                    "nth": rng.randint(1, 2)}]),
        ("local", [{"what": "sft's worker writing its checkpoint", "role": "worker",
                    "match": [f"{sft}/last.ckpt"], "nth": rng.randint(1, 2)}]),
        ("inprocess", [{"what": "the pipeline writing its own record", "role": "pipeline",
                        "match": ["*/pipeline/mlflow_run.json"], "nth": 1}]),
        ("inprocess", [{"what": "the pipeline writing an inline node's done record",
                        "role": "pipeline", "match": [f"{nodes}/rope_sft/*/done.json"],
                        "nth": 1}]),
        ("local", [{"what": "eval_niah's worker writing its outputs (in place)", "role": "worker",
                    "match": [f"{nodes}/eval_niah/*/records.jsonl"], "nth": 1},
                   {"what": "export's worker writing a model folder", "role": "worker",
                    "match": [f"{nodes}/export/*/hf/[!.]*"], "nth": rng.randint(1, 2)}]),
    ]  # fmt: skip


def pipeline(
    out: Path, cache: Path, hooks: Path, executor: str, kills: list[dict[str, Any]]
) -> int:
    """One `python -m ssmax.pipeline run` in its own process group, the kill hook armed with
    `kills`; whatever of its group outlives it is killed after (a crash leaves nothing)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(hooks), str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")]
    )
    extra, armed = [], []
    for i, kill in enumerate(kills):
        if "kill_at" in kill:
            step = kill["kill_at"]
            extra.append(f"trainer.callbacks=[{{_target_:tests.faults.KillAt,step:{step}}}]")
            continue
        count = hooks / f"count{i}"
        count.write_text("")
        armed.append({k: kill[k] for k in ("role", "match", "nth")}
                     | {"count": str(count), "log": str(hooks / "kills.jsonl")})  # fmt: skip
    env["SSMAX_CRASH"] = json.dumps(armed)
    command = [sys.executable, "-m", "ssmax.pipeline", "run", *COMMON, f"executor={executor}",
               *([WORKERS] if executor == "local" else []),
               f"paths.output_dir={out}", f"paths.cache_dir={cache}", *extra]  # fmt: skip
    with open(hooks / "pipeline.log", "a") as log:
        log.write(f"\n=== {[k['what'] for k in kills] or 'to the end'}\n")
        log.flush()
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        code = proc.wait(timeout=600)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    return code


VOLATILE = {"done.json", "config.yaml", "mlflow_run_id", "last.ckpt"}  # ids, paths, clocks


def node_files(out: Path) -> dict[str, str]:
    """Every file of every node folder (relative path) -> its sha256 with the output folder's
    path taken out; files that hold ids, paths or times by nature -> ""."""
    nodes = out / "pipeline" / "nodes"
    found = {}
    for path in sorted(p for p in nodes.rglob("*") if p.is_file()):
        rel = str(path.relative_to(nodes))
        text = b"" if path.name in VOLATILE else path.read_bytes().replace(bytes(out), b"OUT")
        found[rel] = hashlib.sha256(text).hexdigest()[:16] if text else ""
    return found


def outputs(out: Path) -> dict[str, Any]:
    """Each node's done outputs, the output folder's path taken out and MLflow's ids (run
    ids, model versions) left out: another store's numbering."""

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()
                    if k not in ("run_id", "version", "uri")}  # fmt: skip
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value.replace(str(out), "OUT") if isinstance(value, str) else value

    nodes = out / "pipeline" / "nodes"
    return {str(p.parent.parent.relative_to(nodes)): clean(json.loads(p.read_text())["outputs"])
            for p in sorted(nodes.rglob("done.json"))}  # fmt: skip


def weights_digests(out: Path) -> dict[str, str]:
    digest = runpy.run_path(str(ROOT / "scripts" / "weights_digest.py"))["digest"]
    nodes = out / "pipeline" / "nodes"
    return {str(p.relative_to(nodes)): digest(p) for p in sorted(nodes.rglob("model*.pt"))}


def runs(out: Path) -> list[Any]:
    from ssmax.tracking.client import Client

    client = Client(default_store(out))
    exp = client.get_experiment_by_name("ssmax-repro").experiment_id
    return client.search_runs([exp], max_results=1000)


@pytest.mark.slow
def test_a_pipeline_killed_anywhere_loses_nothing(tmp_path: Path, shared_cache: Path) -> None:
    clean, out, hooks = tmp_path / "clean", tmp_path / "crashed", tmp_path / "hooks"
    hooks.mkdir()
    # the uninterrupted run, beside the crashes (in process: its bits equal the workers')
    command = [sys.executable, "-m", "ssmax.pipeline", "run", *COMMON, "executor=inprocess",
               f"paths.output_dir={clean}", f"paths.cache_dir={shared_cache}"]  # fmt: skip
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    with open(hooks / "clean.log", "w") as log:
        uninterrupted = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)

    (hooks / "sitecustomize.py").write_text(HOOK)
    said_path, kills_log = hooks / "pipeline.log", hooks / "kills.jsonl"
    for executor, kills in schedule(SEED):
        before = len(kills_log.read_text().splitlines()) if kills_log.exists() else 0
        start = said_path.stat().st_size if said_path.exists() else 0
        code = pipeline(out, shared_cache, hooks, executor, kills)
        said = said_path.read_text()[start:]
        hits = kills_log.read_text().splitlines()[before:] if kills_log.exists() else []
        armed = [k for k in kills if "kill_at" not in k]
        assert len(hits) == len(armed), f"{[k['what'] for k in kills]}: not reached\n{said}"
        if any(k.get("role") == "pipeline" for k in kills):
            assert code == -signal.SIGKILL, said
        else:  # workers killed: the pipeline goes on and says which nodes failed
            assert code == 1 and said.count("FAILED  ") == len(kills), said
    assert pipeline(out, shared_cache, hooks, "inprocess", []) == 0, said_path.read_text()
    assert uninterrupted.wait(timeout=600) == 0, (hooks / "clean.log").read_text()[-3000:]

    crashed, expected = outputs(out), outputs(clean)
    assert crashed == expected  # train_loss too: a node resumed at its final step keeps it
    assert weights_digests(out) == weights_digests(clean)
    assert node_files(out) == node_files(clean)  # no file more (a partial one), none less
    assert [p for p in out.rglob("*.tmp")] == [], "partial files of atomic writes are left"

    every = runs(out)
    assert [r.info.run_name for r in every if r.info.status == "RUNNING"] == []
    pipelines = sorted((r for r in every if r.data.tags.get("kind") == "pipeline"),
                       key=lambda r: r.info.start_time)  # fmt: skip
    assert len(pipelines) == len(schedule(SEED)) + 1  # each crashed one, then the last
    assert {r.info.status for r in pipelines[:-1]} <= {"KILLED", "FAILED"}
    last = pipelines[-1]
    assert last.info.status == "FINISHED"
    children = [r for r in every if r.data.tags.get("mlflow.parentRunId") == last.info.run_id]
    assert sorted(r.data.tags["node"] for r in children) == sorted(expected)  # one run each
    assert {r.info.status for r in children} == {"FINISHED"}
