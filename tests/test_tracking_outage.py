"""Training against a real `mlflow server` that is not there at start, or goes away mid-run
for longer than MLflow's retries and comes back (ssmax.tracking.reach, ssmax.tracking.spool).

Real parts: `python -m ssmax.train` and `python -m ssmax.pipeline` processes, a real server
(ssmax.tracking.ui.start_ui: its own process group, stopped with SIGTERM), real sqlite. Training is
held at chosen steps (ssmax.lit.hold.HoldAtStep) while the test acts on the server. That training
never waits on the server is shown by events, not durations, in both tests (the server away
mid-run and back; away when the run ends): the training loop's thread sent it nothing
(tests.server_calls.ServerCalls: Python's audit events of the training process, `spool_calls`),
and the steps trained while it was away are in the spool, undelivered, before it is back. Once it
is back every step is on it once, in order (`check_run`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ssmax.lit.hold import held_marker
from ssmax.pipeline.__main__ import main as pipeline_main
from ssmax.report.__main__ import main as report_main
from ssmax.tracking.reach import PROBE_TIMEOUT_S
from ssmax.tracking.spool import SPOOL_FILE, finish_later
from ssmax.tracking.ui import UIServer, free_port, start_ui, stop_ui
from tests.server_calls import calls_to

ROOT = Path(__file__).resolve().parents[1]
# MLflow's own retries turned off, so that the outages below outlast its one attempt (twice over)
# (by default they last ~4 min; the spool does not use them, the run's start and end do).
QUICK_RETRIES = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}
RETRY_BUDGET_S = 1 * 5  # no retry: (1 + retries) attempts of at most 5 s each, no backoff
OUTAGE_S = 2.0 * RETRY_BUDGET_S  # how long the server stays away: twice the retries' budget
END_S = 600  # hang guard for a whole run


def wait_for(path: Path, process: subprocess.Popen, log: Path, limit: float = 300) -> None:
    deadline = time.monotonic() + limit
    while not path.exists():
        assert process.poll() is None, f"training ended ({process.returncode}): {log.read_text()}"
        assert time.monotonic() < deadline, f"no {path.name} in {limit} s: {log.read_text()}"
        time.sleep(0.2)


def server(folder: Path, port: int) -> UIServer:
    return start_ui(folder, port, backend_uri=f"sqlite:///{folder / 'store.db'}")


def train(out: Path, cache: Path, url: str, holds: Path, steps: list[int], log: Path,
          max_steps: int, *extra: str) -> subprocess.Popen:  # fmt: skip
    """ssmax.train held after each of steps until holds/go-<step> exists; what its threads sent
    over the network in holds/calls.json. The caller's PYTHONPATH is kept, after the repository
    (where `tests` is)."""
    holds.mkdir(parents=True, exist_ok=True)
    calls = f"{{_target_: tests.server_calls.ServerCalls, path: '{holds}/calls.json'}}"
    hold = "{{_target_: ssmax.lit.hold.HoldAtStep, step: {0}, release: '{1}/go-{0}'}}"
    callbacks = [hold.format(s, holds) for s in steps] + [calls]
    callback = f"trainer.callbacks=[{','.join(callbacks)}]"
    command = [sys.executable, "-m", "ssmax.train", "preset=smoke", f"paths.output_dir={out}",
               f"paths.cache_dir={cache}", f"tracking.tracking_uri={url}",
               f"trainer.pretrain.max_steps={max_steps}", callback, *extra]  # fmt: skip
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = os.environ | QUICK_RETRIES | {"PYTHONPATH": path}
    with open(log, "w") as handle:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT)


def run_folder(out: Path) -> Path:
    return out / "runs" / "a_softmax-pretrain-seed0"


def pending_steps(folder: Path, key: str) -> list[int]:
    """The steps of `key` that folder's spool holds and the server has not received (the lines
    after the delivered count; the file holds complete lines while training is held)."""
    path = folder / SPOOL_FILE
    sent_file = path.with_suffix(".sent")
    sent = int(sent_file.read_text()) if sent_file.exists() else 0
    records = [json.loads(line) for line in path.read_text().splitlines()[sent:]]
    return [step for r in records for name, _, _, step in r.get("metrics", ()) if name == key]


def spool_calls(holds: Path, port: int) -> list[list]:
    """What the training process in `train(..., holds, ...)` sent to the server on `port` within
    fit's loop (ServerCalls' rows [thread, step, host, port]: connection attempts, refused ones
    included, and requests), checked to come from the spool's delivery thread alone: the
    training loop's thread never talked to the server, so no step waited on it (a step that
    tries the server itself fails here, however short its wait)."""
    calls = [c for c in calls_to(holds / "calls.json", port) if c[1] is not None]
    loop = sorted({(thread, step) for thread, step, _, _ in calls if thread != "mlflow-spool"})
    assert not loop, f"(thread, step) that talked to the server while training: {loop}"
    return calls


def check_run(url: str, folder: Path, max_steps: int, every: int) -> list:
    """Every logged step once, in order, none missing; the run FINISHED; nothing pending.
    The train/loss history."""
    from mlflow import MlflowClient

    client = MlflowClient(url)
    run_id = (folder / "mlflow_run_id").read_text().strip()
    history = client.get_metric_history(run_id, "train/loss")
    steps = [m.step for m in sorted(history, key=lambda m: (m.timestamp, m.step))]
    assert steps == list(range(steps[0], max_steps, every)), steps
    assert steps[0] < every and steps[-1] >= max_steps - every, steps
    vals = [m.step for m in client.get_metric_history(run_id, "val/loss")]
    assert sorted(vals) == sorted(set(vals)), vals
    assert client.get_run(run_id).info.status == "FINISHED"
    assert not (folder / SPOOL_FILE).exists()
    return history


@pytest.fixture(scope="module")
def web_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a web server that is not MLflow (`python -m http.server`: a 404 page)."""
    port, folder = free_port(), tmp_path_factory.mktemp("web")
    command = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)]
    process = subprocess.Popen(command, cwd=folder, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        end = time.monotonic() + 120  # a hang guard: it listens once Python has started
        while time.monotonic() < end and process.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
                break
            except ConnectionRefusedError:
                time.sleep(0.1)
        assert process.poll() is None
        yield f"http://127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait()


# A tracking URI with no MLflow behind it: what the one line says
NO_MLFLOW = {
    "nothing listens": ["is unreachable (connection refused)", "make mlflow-server"],
    "nothing listens, the scheme in capitals": ["is unreachable (connection refused)"],
    "a web server, not MLflow": ["answers but not as an MLflow tracking server does",
                                 "HTTP 404, text/html", "make mlflow-server"],
    "a scheme MLflow does not keep runs at": ["MLflow keeps no runs at ftp:// URIs",
                                              "http://HOST:PORT"],
}  # fmt: skip
NO_SCHEME = "a scheme MLflow does not keep runs at"


def no_mlflow_uri(kind: str, request: pytest.FixtureRequest) -> str:
    if kind.startswith("nothing listens"):  # MLflow reads the scheme in any case, as URLs go
        scheme = "HTTP" if "capitals" in kind else "http"
        return f"{scheme}://127.0.0.1:{free_port()}"
    if kind == "a web server, not MLflow":
        return request.getfixturevalue("web_server")
    return "ftp://127.0.0.1/runs"


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(NO_MLFLOW))
@pytest.mark.parametrize("module", ["ssmax.train", "ssmax.pipeline"])
def test_no_mlflow_at_the_tracking_uri_is_one_line_at_start(
    tmp_path: Path, module: str, kind: str, request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture,
) -> None:  # fmt: skip
    """`python -m ssmax.train` as a process (a Hydra app); the pipeline's entry, the same
    function its `python -m` runs, in this process (test_user_mistakes starts it as a process)."""
    url = no_mlflow_uri(kind, request)
    out = tmp_path / "out"
    overrides = ["preset=smoke", f"paths.output_dir={out}", f"tracking.tracking_uri={url}"]
    began = time.monotonic()
    if module == "ssmax.train":
        done = subprocess.run([sys.executable, "-m", module, *overrides], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        status, err = done.returncode, done.stderr
    else:
        status, err = pipeline_main(["run", *overrides]), capsys.readouterr().err
    seconds = time.monotonic() - began
    print(f"{module}, {kind}: refused in {seconds:.1f} s")
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"tracking.tracking_uri={url}" in lines[0], lines
    assert all(part in lines[0] for part in NO_MLFLOW[kind]), lines
    assert kind == NO_SCHEME or "unset tracking.tracking_uri" in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "nothing left behind"
    # One attempt, connect and read each bounded: 15 s at most whatever the network does.
    assert 2 * PROBE_TIMEOUT_S <= 15
    assert seconds < 60  # a hang guard only (the default retries took 4 min 13 s)


@pytest.mark.parametrize("kind", list(NO_MLFLOW))
def test_report_without_mlflow_at_the_tracking_uri_is_one_line(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture
) -> None:
    """`make report TRACKING_URI=...` with the server down (it waited 4.4 min on MLflow's
    retries, then a traceback), a web server that is not MLflow, or an ftp:// URI: the
    commands' start check, one line, status 2, nothing written."""
    url, out = no_mlflow_uri(kind, request), tmp_path / "out"
    began = time.monotonic()
    assert report_main(["--output-dir", str(out), "--tracking-uri", url]) == 2
    seconds = time.monotonic() - began
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"--tracking-uri={url}" in lines[0], lines
    assert all(part in lines[0] for part in NO_MLFLOW[kind]), lines
    assert kind == NO_SCHEME or f"leave --tracking-uri out to read {out}" in lines[0], lines
    assert not out.exists()
    assert seconds < 60  # a hang guard only: one attempt, 15 s at most


@pytest.mark.slow
def test_server_away_longer_than_the_retries_mid_pretraining(
    tmp_path: Path, shared_cache: Path
) -> None:
    """No training step waits on the server, shown by events: the training loop's thread never
    sends it anything (a step that tries the server itself fails here, however short its wait),
    the steps trained while it is away are in the spool before it comes back (a step that waits
    for it to come back never reaches the hold at step 40: wait_for's hang guard). Every step is
    logged once, in order, once it is back."""
    port, holds, log = free_port(), tmp_path / "holds", tmp_path / "train.log"
    srv, out, max_steps = server(tmp_path / "server", port), tmp_path / "out", 60
    process = train(out, shared_cache, srv.url, holds, [20, 40], log, max_steps)
    folder = run_folder(out)
    try:
        wait_for(held_marker(folder, 20), process, log)
        stop_ui(srv)  # the server goes away at step 20 ...
        away = time.monotonic()
        (holds / "go-20").touch()
        wait_for(held_marker(folder, 40), process, log)  # ... training goes on to step 40
        # Held at step 40, the server still away: steps 21-39 were trained, and their metrics
        # kept for it, before it is back (they are logged at the step after their hold, so
        # step 40's come after go-40).
        kept = [s for s in pending_steps(folder, "train/loss") if 20 < s < 40]
        time.sleep(max(0.0, away + OUTAGE_S - time.monotonic()))  # the outage lasts OUTAGE_S
        print(f"server away for {time.monotonic() - away:.1f} s (retry budget {RETRY_BUDGET_S} s)")
        back = time.time()
        srv = server(tmp_path / "server", port)  # back on the same port and store
        (holds / "go-40").touch()
        assert process.wait(END_S) == 0, log.read_text()
        history = check_run(srv.url, folder, max_steps, every=2)
        # the steps trained while it was away: kept then, delivered later with their own times
        during = [m for m in history if 20 < m.step < 40]
        assert kept == [m.step for m in during] and len(kept) == 9, (kept, during)
        late = [(m.step, m.timestamp / 1000 - back) for m in during if m.timestamp >= back * 1000]
        assert not late, late
        # the config logged at the start went to the server's own folder, not the test's cwd
        assert list((tmp_path / "server" / "mlartifacts").rglob("config.yaml"))
    finally:
        process.kill()
        stop_ui(srv)
    # Within fit's loop only the spool's thread talked to the server; it did (retries while
    # away, deliveries): the record hears it.
    calls = spool_calls(holds, port)
    assert [c for c in calls if 20 <= c[1] <= 40], calls
    print(f"{len(calls)} calls to the server while training, all from the spool's thread")
    assert "unreachable" not in log.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("deliverer", ["report", "next run"])
def test_run_ending_while_the_server_is_away_leaves_it_for_later(
    tmp_path: Path, shared_cache: Path, deliverer: str
) -> None:
    """The server goes away at step 10 and the run ends (step 30) without it. No training step
    waits on it, shown by events: the training loop's thread never sends it anything, and the
    steps trained from step 10 on are all in the spool, undelivered, when the process ends (one
    line says where). The report, or the same command again, delivers them once the server is
    back: every step logged once, in order, the run FINISHED (and the report's tag on it)."""
    port, holds, log = free_port(), tmp_path / "holds", tmp_path / "train.log"
    srv, out, max_steps = server(tmp_path / "server", port), tmp_path / "out", 30
    # it ends with the server away: a second of tracking.end_wait_s shows the wait as well
    process = train(out, shared_cache, srv.url, holds, [10], log, max_steps,
                    "tracking.end_wait_s=1")  # fmt: skip
    folder = run_folder(out)
    try:
        wait_for(held_marker(folder, 10), process, log)
        stop_ui(srv)
        (holds / "go-10").touch()
        assert process.wait(END_S) == 0, log.read_text()  # the node ends: the server is away
        said = [line for line in log.read_text().splitlines() if "unreachable" in line]
        assert len(said) == 1 and "python -m ssmax.report" in said[0], said
        assert "connection refused" in said[0]
        # Within fit's loop only the spool's thread talked to the server; from step 10 on it
        # tried (refused), and kept every step trained since, undelivered (steps 10-28: step
        # 10's metrics are logged after its hold).
        calls = spool_calls(holds, port)
        assert [c for c in calls if c[1] >= 10], calls
        assert (folder / SPOOL_FILE).exists()
        kept = [s for s in pending_steps(folder, "train/loss") if s >= 10]
        run_id = (folder / "mlflow_run_id").read_text().strip()
        if deliverer == "report":  # as the pipeline ends a training node: behind its metrics
            assert finish_later(folder, srv.url, run_id, "FINISHED", {"node": "pretrain/x"})
        srv = server(tmp_path / "server", port)
        if deliverer == "report":
            report = subprocess.run(
                [sys.executable, "-m", "ssmax.report", "--output-dir", str(out),
                 "--tracking-uri", srv.url], capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert "delivered" in report.stdout, report.stdout + report.stderr
        else:  # the same command again: it resumes the finished run (validates it again)
            again = train(out, shared_cache, srv.url, tmp_path / "again", [],
                          tmp_path / "again.log", max_steps)  # fmt: skip
            assert again.wait(END_S) == 0, (tmp_path / "again.log").read_text()
        history = check_run(srv.url, folder, max_steps, every=2)
        # the steps kept while it was away are the ones on it now, each once
        assert kept == [m.step for m in history if m.step >= 10] == list(range(10, 30, 2)), kept
        if deliverer == "report":
            from mlflow import MlflowClient

            assert MlflowClient(srv.url).get_run(run_id).data.tags["node"] == "pretrain/x"
    finally:
        process.kill()
        stop_ui(srv)


@pytest.mark.slow
def test_run_stopped_while_the_server_is_away_says_what_it_kept(
    tmp_path: Path, shared_cache: Path
) -> None:
    """SIGTERM mid-training with the server away: the run ends (Lightning stops at the next
    step) saying in one line what it kept where, as a run that ends normally does."""
    port, holds, log = free_port(), tmp_path / "holds", tmp_path / "train.log"
    srv, out = server(tmp_path / "server", port), tmp_path / "out"
    process = train(out, shared_cache, srv.url, holds, [10], log, max_steps=30)
    folder = run_folder(out)
    try:
        wait_for(held_marker(folder, 10), process, log)
        stop_ui(srv)
        process.send_signal(signal.SIGTERM)  # noted while held; it stops after step 10
        (holds / "go-10").touch()
        print(f"stopped: exit status {process.wait(END_S)}")
        said = [line for line in log.read_text().splitlines() if "unreachable" in line]
        assert len(said) == 1 and str(folder / SPOOL_FILE) in said[0], log.read_text()[-3000:]
        assert "python -m ssmax.report" in said[0] and "connection refused" in said[0]
        spool = folder / SPOOL_FILE
        count = spool.with_suffix(".sent")
        sent = int(count.read_text()) if count.exists() else 0
        assert len(spool.read_text().splitlines()) > sent  # kept, undelivered (its end status)
    finally:
        process.kill()
        stop_ui(srv)


def test_a_spool_line_cut_by_a_kill_is_dropped_whole(tmp_path: Path) -> None:
    """A process killed mid-write leaves a partial last line: the next owner drops it (its
    step is trained and logged again after the resume) and appends on a clean line."""
    from ssmax.tracking.spool import Spool

    path = tmp_path / SPOOL_FILE
    path.write_text('{"run_id": "r", "metrics": [["a", 1.0, 5, 1]]}\n{"run_id": "r", "metr')
    spool = Spool(path)
    assert spool.pending == [{"run_id": "r", "metrics": [["a", 1.0, 5, 1]]}]
    spool.append_quietly({"run_id": "r", "metrics": [["a", 2.0, 6, 2]]})
    spool.handle.close()
    assert [json.loads(line)["metrics"][0][3] for line in path.read_text().splitlines()] == [1, 2]


@pytest.mark.slow
def test_local_worker_stopped_while_the_server_is_away_says_what_it_kept(
    tmp_path: Path, shared_cache: Path
) -> None:
    """The same stop in a node of the local executor: its worker is a fork, which leaves by
    os._exit and skips atexit; the worker ends its spool itself, and the pipeline's own output
    relays the line (the node's log holds it too)."""
    port, go, log = free_port(), tmp_path / "go", tmp_path / "pipeline.log"
    srv, out = server(tmp_path / "server", port), tmp_path / "out"
    hold = f"trainer.callbacks=[{{_target_: ssmax.lit.hold.HoldAtStep, step: 10, release: '{go}'}}]"
    command = [sys.executable, "-m", "ssmax.pipeline", "run", "preset=smoke", "executor=local",
               "pipeline.variants=[a_softmax]", "pipeline.targets=[pretrain]",
               f"paths.output_dir={out}", f"paths.cache_dir={shared_cache}",
               f"tracking.tracking_uri={srv.url}", "trainer.pretrain.max_steps=30",
               hold]  # fmt: skip
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = os.environ | QUICK_RETRIES | {"PYTHONPATH": path}
    with open(log, "w") as handle:
        process = subprocess.Popen(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT,
                                   env=env)  # fmt: skip
    nodes = out / "pipeline" / "nodes" / "pretrain" / "a_softmax" / "seed0"
    try:
        deadline = time.monotonic() + 300
        while not list(nodes.glob(f"*/{held_marker('', 10)}")):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        lines = log.read_text().splitlines()
        started = "run     pretrain/a_softmax/seed0 (pid "
        (pid,) = [int(line.split("(pid ")[1].rstrip(")")) for line in lines if started in line]
        stop_ui(srv)
        os.kill(pid, signal.SIGTERM)  # the node's worker: noted while held, stops after step 10
        go.touch()
        assert process.wait(END_S) != 0  # the node did not finish
        said = [line for line in log.read_text().splitlines() if "unreachable" in line]
        assert len(said) == 1 and said[0].startswith("kept    pretrain/a_softmax/seed0: ")
        assert SPOOL_FILE in said[0] and "connection refused" in said[0], log.read_text()[-3000:]
    finally:
        process.kill()
        stop_ui(srv)
