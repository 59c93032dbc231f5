"""How far a pipeline run has come, for the line each finished node prints: the nodes ended of
those it runs, and the time left, the wall time so far scaled by the FLOPs left over the FLOPs
done (each node's from the plan, ssmax.pipeline.plan_cost; a node whose stage declares no cost
counts as none). The estimate is the run's own pace: no throughput assumed."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ssmax.pipeline.bundle import BundleJob, nodes_of
from ssmax.pipeline.job import NodeJob
from ssmax.pipeline.plan_cost import duration


@dataclass
class Progress:
    flops: dict[str, float]  # node -> its FLOPs, for every node this run runs
    start: float = field(default_factory=time.perf_counter)
    ended: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, jobs: Sequence[NodeJob | BundleJob]) -> Progress:
        """The nodes of jobs that are not cached."""
        return cls({n.name: n.flops or 0.0 for j in jobs if j.done is None for n in nodes_of(j)})

    def after(self, names: Iterable[str]) -> str:
        """'k/N', and once a share of the FLOPs is done, '~T left': with these nodes ended."""
        self.ended.update(n for n in names if n in self.flops)
        said = f"{len(self.ended)}/{len(self.flops)}"
        done, total = sum(self.flops[n] for n in self.ended), sum(self.flops.values())
        if 0 < done < total:
            left_s = (time.perf_counter() - self.start) * (total - done) / done
            said += f", ~{duration(left_s / 3600)} left"
        return said
