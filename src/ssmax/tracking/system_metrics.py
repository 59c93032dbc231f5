"""System metrics of a node's run (`tracking.system_metrics`, on by default): CPU, memory,
disk, network and, per NVIDIA GPU that nvidia-ml-py finds, utilisation, memory and power,
sampled by MLflow's own monitors (mlflow.system_metrics.metrics) plus this process's resident
memory, logged as `system/<name>` (`system/node<k>/<name>` on a multi-node run).

Not MLflow's SystemMetricsMonitor, which asks the server whether the run still runs at every
sample and joins its thread at the end: with a server away that is minutes of retries, and the
end of training would wait for them; a run shorter than its interval logs nothing. Here the
thread samples at the end of each window and hands the sample to `log` (training: its logger,
whose spool never waits on a server), the last (short) window is logged at stop, and stop
waits a few seconds at most.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ssmax.tracking.store import mlflow_client, tracking_uri

if TYPE_CHECKING:
    from omegaconf import DictConfig

STOP_WAIT_S = 5.0  # at most, for the last window's logging
log_ = logging.getLogger(__name__)
Log = Callable[[dict[str, float], int], None]  # (metrics by name, step)


def _monitors() -> list:
    from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor
    from mlflow.system_metrics.metrics.disk_monitor import DiskMonitor
    from mlflow.system_metrics.metrics.network_monitor import NetworkMonitor

    found = [CPUMonitor(), DiskMonitor(), NetworkMonitor()]
    try:  # an NVIDIA GPU through nvidia-ml-py; none: CPU metrics only
        from mlflow.system_metrics.metrics.gpu_monitor import GPUMonitor

        found.append(GPUMonitor())
    except Exception:  # noqa: BLE001 - no driver, no library, no GPU: all mean "none here"
        pass
    return found


class SystemMetrics:
    """A thread that samples every `interval_s` and logs each sample as one step (from
    first_step: a resumed run goes on after the steps it holds)."""

    def __init__(
        self, log: Log, interval_s: float, node: str | None = None, first_step: int = 0
    ) -> None:
        import psutil

        self.log, self.interval_s, self.step = log, float(interval_s), first_step
        self.prefix = f"system/{node}/" if node else "system/"
        self.monitors, self.process = _monitors(), psutil.Process()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="system-metrics", daemon=True)

    def start(self) -> SystemMetrics:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Log the last window (a short node has one) and end; never waits long."""
        self._stop.set()
        self._thread.join(STOP_WAIT_S)

    def _loop(self) -> None:
        import psutil

        # The first window's start. psutil keeps the last CPU reading per thread, and a
        # thread's first one is 0.0: taken here, not at a window's end, it is never logged.
        psutil.cpu_percent()
        stopping = False
        while not stopping:  # stop ends the last window early: it is logged all the same
            stopping = self._stop.wait(self.interval_s)
            self._log_sample()

    def _log_sample(self) -> None:
        """At a window's end: the CPU over the window, memory at its end."""
        try:
            metrics = self._sample()
            self.log({self.prefix + k: float(v) for k, v in metrics.items()}, self.step)
        except Exception as err:  # noqa: BLE001 - metrics about the run never end the run
            log_.warning("system metrics not logged: %s", err)
        self.step += 1

    def _sample(self) -> dict[str, float]:
        metrics = {"process_memory_megabytes": self.process.memory_info().rss / 1e6}
        for monitor in self.monitors:
            monitor.collect_metrics()
            metrics |= monitor.aggregate_metrics()
            monitor.clear_metrics()
        return metrics


def for_run(cfg: DictConfig, run_id: str) -> SystemMetrics | None:
    """A node's run that does not train (an eval, the export): its system metrics straight to
    its store (tracking.system_metrics); None when off."""
    if not cfg.tracking.get("system_metrics", True):
        return None
    log = store_log(mlflow_client(tracking_uri(cfg)), run_id)
    interval = cfg.tracking.get("system_metrics_interval_s", 10.0)
    return SystemMetrics(log, interval, node_label(int(cfg.trainer.num_nodes), 0)).start()


def store_log(client: Any, run_id: str) -> Log:
    """A Log straight into the run (a client of its store)."""
    from mlflow.entities import Metric

    def log(metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()])

    return log


def node_label(num_nodes: int, node_rank: int) -> str | None:
    """The metrics' node label on a multi-node run (None on one node)."""
    return f"node{node_rank}" if num_nodes > 1 else None
