"""ServerCalls: a test callback that records which thread of a training process talks over the
network, and at which step, given to a run as
`trainer.callbacks=[{_target_: tests.server_calls.ServerCalls, path: FILE}]`.

It listens to Python's audit events (sys.addaudithook), not to any ssmax or MLflow code: every
TCP connection attempt (`socket.connect`, raised before the connection is tried: a refused one
counts) and every request sent over an open one (`http.client.send`, which urllib3's
connections use too) is one row [thread name, step, host, port]. The step is the optimizer
step the training loop is at (trainer.global_step), None outside fit's training loop (the run's
creation before it, the end of the run after it). At the end of fit it writes FILE: the rows.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import lightning as L


class ServerCalls(L.Callback):
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.rows: list[list[Any]] = []
        self.step: int | None = None
        sys.addaudithook(self._heard)  # for the process's life: it writes only within fit

    def _heard(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "socket.connect" and isinstance(args[1], tuple):  # (host, port, ...)
            host, port = args[1][:2]
        elif event == "http.client.send":  # args: (connection, data)
            host, port = args[0].host, args[0].port
        else:
            return
        self.rows.append([threading.current_thread().name, self.step, host, port])

    def on_train_start(self, trainer: L.Trainer, *_: object) -> None:
        self.step = trainer.global_step

    def on_train_batch_start(self, trainer: L.Trainer, *_: object) -> None:
        self.step = trainer.global_step

    def on_train_end(self, trainer: L.Trainer, *_: object) -> None:
        self.step = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(list(self.rows)))


def calls_to(path: Path, port: int) -> list[list[Any]]:
    """The rows of a ServerCalls file that went to `port`."""
    return [row for row in json.loads(path.read_text()) if row[3] == port]
