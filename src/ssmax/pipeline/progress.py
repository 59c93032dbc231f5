"""How far a pipeline run has come, for the line each finished node prints: the nodes ended of
those it runs, and the time left, the wall time so far scaled by the FLOPs left over the FLOPs
done (each node's from the plan, ssmax.pipeline.plan_cost; a node whose stage declares no cost
counts as none). The estimate is the run's own pace: no throughput assumed. A node that failed
or was blocked has ended but did no work to time: its FLOPs are neither done nor left."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ssmax.pipeline.bundle.group import BundleJob, nodes_of
from ssmax.pipeline.job import NodeJob


def duration(hours: float) -> str:
    """A time for people: '-', '12 s', '3.5 min', '2.1 h', '3.0 d'."""
    if not hours:
        return "-"
    if hours >= 48:
        return f"{hours / 24:.1f} d"
    if hours >= 1:
        return f"{hours:.1f} h"
    return f"{hours * 60:.1f} min" if hours >= 1 / 60 else f"{hours * 3600:.2g} s"


@dataclass
class Progress:
    flops: dict[str, float]  # node -> its FLOPs, for every node this run runs
    start: float = field(default_factory=time.perf_counter)
    ended: dict[str, str] = field(default_factory=dict)  # node -> its state once it ended

    @classmethod
    def of(cls, jobs: Sequence[NodeJob | BundleJob]) -> Progress:
        """The nodes of jobs that are not cached."""
        return cls({n.name: n.flops or 0.0 for j in jobs if j.done is None for n in nodes_of(j)})

    def after(self, states: Mapping[str, str]) -> str:
        """'k/N', and once some FLOPs are done and some left, '~T left': with these nodes ended
        in these states ("done", "failed", "blocked"; a node it does not run is not counted)."""
        self.ended.update((n, s) for n, s in states.items() if n in self.flops)
        said = f"{len(self.ended)}/{len(self.flops)}"
        done = sum(self.flops[n] for n, s in self.ended.items() if s == "done")
        left = sum(f for n, f in self.flops.items() if n not in self.ended)
        if done > 0 and left > 0:
            left_s = (time.perf_counter() - self.start) * left / done
            said += f", ~{duration(left_s / 3600)} left"
        return said
