"""A planned node as a job: everything a worker needs to run it (ssmax.pipeline.run.plan makes
them, an executor runs them, ssmax.pipeline.run.execute_node runs one), picklable, paths
absolute.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ssmax.pipeline.state import read_done


@dataclass
class NodeJob:
    """Everything a worker needs to run one node (picklable, paths absolute)."""

    name: str
    stage: str
    module: str  # in ssmax.stages
    trains: bool  # the stage makes its own MLflow run and checkpoints
    inline: bool  # no compute: the local executor runs it in its own process
    variant: str | None
    seed: int | None
    cfg_yaml: str
    fingerprint: str
    dir: str
    input_dirs: dict[str, str]
    parent_run_id: str | None = None
    threads: int | None = None  # torch threads for this node (parallel local workers share cores)
    flops: float | None = None  # what plan counts for it (set by the executor; kept in done.json)
    remaining: float = 0.0  # its FLOPs and the heaviest chain waiting on it (the local order)

    @property
    def done(self) -> dict[str, Any] | None:
        return read_done(Path(self.dir), self.fingerprint)
