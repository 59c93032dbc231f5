"""Training that never waits for, or dies of, a remote tracking server.

MLflow's client retries a request for about four minutes (MLFLOW_HTTP_REQUEST_MAX_RETRIES=7,
backoff factor 2) in the calling thread, then raises; its asynchronous logging
(MLFLOW_ENABLE_ASYNC_LOGGING) runs the same calls in a thread and, when they fail, logs an
error and drops the batch (mlflow/utils/async_logging/async_logging_queue.py). Neither keeps a
metric through an outage longer than the retries. So, for an http(s) tracking URI:

- `ssmax.tracking.reach.check_reachable`: one short request before any work (the commands).
- `Spool`, under training's logger (`ssmax.lit.trainer.SpoolingMLFlowLogger`): each metrics
  batch (and the run's final status) is appended to <run folder>/mlflow-pending.jsonl and a
  thread delivers the lines in order, one attempt at a time with a short timeout, retrying
  while the server is away; the training step never waits. What is still pending when the
  run ends, or when its process ends before that (a stop: SIGTERM, Ctrl-C), stays in the
  file (one line says so); the next run of that folder, `python -m ssmax.pipeline run` and
  `python -m ssmax.report` deliver it (`deliver_pending`). A line
  delivered twice (sent, then the process died before counting it) is harmless: the server
  keeps one copy of an identical (key, value, timestamp, step).
- `finish_later`: a pipeline's training node that ends with metrics pending is finished (tags,
  status) through the same file, behind them.

A local sqlite store needs none of this (no server to lose): it is written directly, as before.
This module is plain MLflow and imports no Lightning: `python -m ssmax.report` and the pipeline
deliver what is pending without it.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import math
import re
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ssmax.tracking.reach import request, why

SPOOL_FILE = "mlflow-pending.jsonl"  # in the run folder: what the server has not received yet
SEND_TIMEOUT_S = 5  # one delivery attempt; the training thread never waits for it
RETRY_EVERY_S = 2.0  # between attempts while the server is away
DRAIN_WAIT_S = 10.0  # at the end of a run: how long to wait for the server before leaving
STOP_WAIT_S = 2.0  # a process that ends without closing its spool (a stop: SIGTERM, Ctrl-C)
MAX_BATCH = 1000  # metrics per log-batch request (MLflow's limit)
KEPT = "MLflow records kept in"  # the words of the line that says what stays for later
_BAD_KEY = re.compile(r"[^a-zA-Z0-9_/. -]+")  # what MLflow refuses in a metric name
_OPEN: weakref.WeakSet[Spool] = weakref.WeakSet()  # the process's spools not closed yet


class Spool:
    """An append-only file of tracking calls and the thread that delivers them in order.

    `<file>.sent` holds how many lines the server has; both files go once all are delivered.
    The file is locked (flock) while one process owns it: a second one leaves it alone."""

    def __init__(self, path: Path) -> None:
        self.path, self.sent_file = path, path.with_suffix(".sent")
        self.handle = open(path, "a+")  # noqa: SIM115 - held for the spool's life (the lock)
        fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises when another owns it
        self.handle.seek(0)
        text = self.handle.read()
        if not text.endswith("\n") and text:  # a line cut by a kill: its step is trained again
            self.handle.truncate(text.rfind("\n") + 1)
        lines = text.splitlines()[: text.count("\n")]
        sent = int(self.sent_file.read_text()) if self.sent_file.exists() else 0
        self.pending: list[dict[str, Any]] = [json.loads(line) for line in lines[sent:]]
        self.sent = sent
        self.error = ""  # why the server did not take the last attempt, in a few words
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self.closed = self.given_up = False
        atexit.register(self._at_exit)
        _OPEN.add(self)

    def start(self) -> None:
        """Deliver from a thread from now on (what an earlier run left first)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="mlflow-spool", daemon=True)
            self._thread.start()

    def append(self, record: dict[str, Any]) -> None:
        """Keep a record on disk and queue it for the thread; returns at once."""
        self.append_quietly(record)
        self.start()

    def append_quietly(self, record: dict[str, Any]) -> None:
        """Keep a record on disk and queue it, without starting a thread. Threads may append at
        once (training's steps, its system metrics): one whole line each."""
        line = json.dumps(record) + "\n"
        with self._wake:
            self.handle.write(line)
            self.handle.flush()
            self.pending.append(record)
            self._wake.notify()

    def log_metrics(self, uri: str, run_id: str, metrics: Mapping[str, float], step: int) -> None:
        """Queue one step of a run's metrics (names MLflow would refuse cleaned of what it
        refuses); returns at once."""
        now = int(time.time() * 1000)
        rows = [[_BAD_KEY.sub("", k), float(v), now, step] for k, v in metrics.items()]
        if rows:
            self.append({"uri": uri, "run_id": run_id, "metrics": rows})

    def drain(self, wait: float = DRAIN_WAIT_S) -> bool:
        """A run's end: wait up to `wait` s for the server, one line when some is left (in the
        file, for the next run or `python -m ssmax.report`), release the file."""
        done = self.deliver(wait)
        if not done:
            print(pending_line(self, self.pending[0]["uri"]), file=sys.stderr, flush=True)
        self.close()
        return done

    def deliver(self, wait: float) -> bool:
        """Deliver what is pending, trying until done or `wait` seconds have passed; True when
        nothing is left. With the thread running, waits for it instead."""
        deadline = time.monotonic() + wait
        while self.pending and time.monotonic() < deadline:
            if self._thread is None and not self._send_next():
                time.sleep(min(RETRY_EVERY_S, max(0.0, deadline - time.monotonic())))
            elif self._thread is not None:
                with self._wake:
                    self._wake.wait(0.2)
        return not self.pending

    def close(self) -> None:
        """Stop delivering, release the file; remove it (and its count) when all was delivered."""
        atexit.unregister(self._at_exit)
        _OPEN.discard(self)
        with self._wake:
            self.closed = True
            self._wake.notify_all()
        if self._thread is not None:  # let an attempt under way finish and count itself
            self._thread.join(SEND_TIMEOUT_S + 1)
        with self._wake:
            self.given_up = True  # an attempt still under way counts nothing from here on
        if not self.pending:
            self.path.unlink(missing_ok=True)
            self.sent_file.unlink(missing_ok=True)
        self.handle.close()

    def _at_exit(self) -> None:
        """The process ends with the spool open: its run did not reach its end (SIGTERM stops
        Lightning with a SystemExit; Ctrl-C). A short wait for the server, then one line on
        what stays in the file, as at a run's end."""
        if self.handle.closed:  # released already
            return
        if self.pending and not self.deliver(STOP_WAIT_S):
            print(pending_line(self, self.pending[0]["uri"]), file=sys.stderr, flush=True)
        self.close()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self.pending and not self.closed:
                    self._wake.wait()
                if self.closed:
                    return
            if not self._send_next():
                with self._wake:
                    self._wake.wait(RETRY_EVERY_S)  # close() cuts the wait short

    def _send_next(self) -> bool:
        """Send the first pending record (with the metrics records of the same run after it, up
        to MAX_BATCH metrics, as one request); False when the server did not take it."""
        from mlflow.exceptions import MlflowException, RestException

        with self._wake:
            batch = _leading_batch(self.pending)
        try:
            _send(batch)
        except RestException as err:
            if err.get_http_status_code() >= 500 or err.get_http_status_code() == 429:
                self.error = f"HTTP {err.get_http_status_code()}"  # busy: again later
                return False
            # refused (a bad value): it never will take it
            print(f"warning: MLflow refused a pending record ({err}); dropped", file=sys.stderr)
        except MlflowException as err:  # away: try again later, in the same order
            self.error = why(err, SEND_TIMEOUT_S)
            return False
        except Exception as err:  # noqa: BLE001 - a record no request can carry: never loop on it
            print(f"warning: a pending MLflow record cannot be sent ({err}); dropped",
                  file=sys.stderr)  # fmt: skip
        with self._wake:
            if self.given_up:  # close() is done with the files: sent again later, harmlessly
                return True
            self.sent_file.write_text(str(self.sent + len(batch)))  # a crash first: sent again
            del self.pending[: len(batch)]
            self.sent += len(batch)
            self._wake.notify_all()
        return True


def end_open_spools() -> None:
    """What the process's exit would do for every spool still open: a process that leaves by
    os._exit (a forked pipeline worker, as multiprocessing ends its children) skips atexit."""
    for spool in list(_OPEN):
        spool._at_exit()


def pending_line(spool: Spool, uri: str) -> str:
    return (f"tracking server {uri} unreachable ({spool.error or 'no answer'}): "
            f"{len(spool.pending)} {KEPT} {spool.path}; the next run of that "
            "folder, `python -m ssmax.pipeline run` or `python -m ssmax.report` delivers "
            "them")  # fmt: skip


def finish_later(
    folder: str | Path, uri: str, run_id: str, status: str, tags: dict[str, str]
) -> bool:
    """A run whose spool in `folder` is still pending (its server was away when training
    ended) is finished through the spool too, behind its metrics: True. False when nothing is
    pending there (finish it directly)."""
    path = Path(folder) / SPOOL_FILE
    if not path.exists():
        return False
    spool = Spool(path)
    if not spool.pending:
        spool.close()
        return False
    now = int(time.time() * 1000)
    spool.append_quietly({"uri": uri, "run_id": run_id, "tags": [[k, v] for k, v in tags.items()]})
    spool.append_quietly({"uri": uri, "run_id": run_id, "status": status, "end_time": now})
    spool.close()
    return True


def deliver_pending(root: str | Path, wait: float = DRAIN_WAIT_S) -> int:
    """Deliver what runs under `root` left pending (each file's records name their server);
    the number of files still pending afterwards. A file a running training owns is its own
    thread's to deliver: skipped."""
    left = 0
    for path in sorted(Path(root).glob(f"**/{SPOOL_FILE}")):
        try:
            spool = Spool(path)
        except BlockingIOError:
            continue
        if spool.pending and not spool.deliver(wait):
            left += 1
            print(pending_line(spool, spool.pending[0]["uri"]), file=sys.stderr, flush=True)
        elif spool.sent:
            print(f"delivered {spool.sent} pending MLflow records from {path}", flush=True)
        spool.close()
    return left


def _leading_batch(pending: list[dict[str, Any]]) -> list[dict[str, Any]]:
    first = pending[0]
    batch, count = [first], len(first.get("metrics", ()))
    if "metrics" not in first:
        return batch
    for record in pending[1:]:
        same = record.get("run_id") == first["run_id"] and record.get("uri") == first["uri"]
        if not same or "metrics" not in record or count + len(record["metrics"]) > MAX_BATCH:
            break
        batch.append(record)
        count += len(record["metrics"])
    return batch


def _send(batch: list[dict[str, Any]]) -> None:
    first = batch[0]
    uri, run_id = first["uri"], first["run_id"]
    if first.get("superseded"):
        return
    if "status" in first:
        body = {"run_id": run_id, "status": first["status"], "end_time": first["end_time"]}
        request(uri, "/api/2.0/mlflow/runs/update", "POST", SEND_TIMEOUT_S, json=body)
        return
    metrics = [{"key": k, "value": _json_float(v), "timestamp": t, "step": s}
               for record in batch for k, v, t, s in record.get("metrics", ())]  # fmt: skip
    tags = [{"key": k, "value": v} for k, v in first.get("tags", ())]
    body = {"run_id": run_id, "metrics": metrics, "tags": tags}
    request(uri, "/api/2.0/mlflow/runs/log-batch", "POST", SEND_TIMEOUT_S, json=body)


def _json_float(value: float) -> float | str:
    """NaN and infinities as MLflow's JSON (protobuf's) spells them; JSON has no literal."""
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
