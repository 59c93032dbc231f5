"""A training run's system metrics, one sampler per node (tracking.system_metrics): the first
process of every node (its local rank 0) samples that node, its CPUs, memory, disk, network
and all its GPUs (ssmax.tracking.system_metrics), into the run global rank 0's logger made, labelled
`system/node<k>/...` on a multi-node run. Rank 0 logs through its logger (a server: its spool,
never waiting); another node, which has no logger, straight into the store, or for a server
through a spool of its own in the run folder (`system-node<k>/`, delivered as rank 0's is).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from omegaconf import DictConfig

from ssmax.tracking.spool import DRAIN_WAIT_S, SPOOL_FILE, Spool
from ssmax.tracking.store import is_server, mlflow_client, tracking_uri
from ssmax.tracking.system_metrics import Log, SystemMetrics, node_label, store_log

PREFIX = "system/"


class NodeSystemMetrics(L.Callback):
    """Started at the first setup (fit, or validate alone), on every rank: rank 0 tells the
    others its run and where its steps go on (a collective, hence on every rank); stopped by
    stop() when training ends, fails or is stopped (ssmax.lit.trainer.train)."""

    def __init__(self, cfg: DictConfig, run_dir: str | Path) -> None:
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.monitor: SystemMetrics | None = None
        self.spool: Any = None  # another node's own, for a server
        self._set_up = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._set_up:  # fit, then validate: one sampler through both
            return
        self._set_up = True
        logger = trainer.logger if trainer.is_global_zero else None
        mine = (logger.run_id, logger.next_step(PREFIX)) if logger else None
        found = trainer.strategy.broadcast(mine, src=0)
        if found is None or trainer.local_rank != 0:  # tracking off; a node's other ranks
            return
        run_id, first_step = found
        node = node_label(trainer.num_nodes, trainer.node_rank)
        if logger is None:
            log = self._log(run_id, node)
        elif hasattr(logger, "log_system_metrics"):  # a server: the logger's spool
            log = logger.log_system_metrics
        else:
            log = store_log(logger.experiment, run_id)
        interval = self.cfg.tracking.get("system_metrics_interval_s", 10.0)
        self.monitor = SystemMetrics(log, interval, node, first_step).start()

    def _log(self, run_id: str, node: str | None) -> Log:
        """Another node's: straight into the store; for a server, through its own spool."""
        uri = tracking_uri(self.cfg)
        if not is_server(uri):
            return store_log(mlflow_client(uri), run_id)
        folder = self.run_dir / f"system-{node}"
        folder.mkdir(parents=True, exist_ok=True)
        self.spool = spool = Spool(folder / SPOOL_FILE)

        return lambda metrics, step: spool.log_metrics(uri, run_id, metrics, step)

    def stop(self) -> None:
        """The last sample; another node's spool waits for its server as rank 0's does."""
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor = None
        if self.spool is not None:
            self.spool.drain(self.cfg.tracking.get("end_wait_s", DRAIN_WAIT_S))
            self.spool = None
