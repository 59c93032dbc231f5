"""A bundle of eval nodes as one job (a ssmax.pipeline.bundle.group.BundleJob of an EVALS stage):
its seeds evaluated one after another in this process, each by the solo node's own call
(ssmax.pipeline.run.execute_node), so that each writes what its solo node writes, equal bit for
bit: its folder, outputs, MLflow run and done record (plus `bundle`), under its fingerprint.

Why one after another, not vmapped over a seed axis (docs/training.md, "Seeds bundled"): an
eval node's time beside its arithmetic is the process's (its start, CUDA's context and first
kernels, torch.compile's compile, the NIAH prompt builders), paid once a job here, while the
evals' own loops (NIAH's greedy decoding with a KV cache, per cell and length; the needle
scores' hooks) have no batched form that would keep each seed's numbers bit for bit.
torch.compile reuses a graph for another seed's model of the same class and shapes in one
process (dynamo's cache sits on the function's code; measured: one compile for three seeds).

Each seed's record is written as it finishes: a bundle stopped midway leaves the seeds it
finished done and the next run evaluates the others. A seed that fails does not stop the
others; the first error is raised once they ran (the executor settles each seed by its record).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from ssmax.pipeline.bundle.group import BundleJob
from ssmax.pipeline.run import execute_node


def execute_evals(job: BundleJob) -> dict[str, Any]:
    """Evaluate the bundle's seeds not done yet, one after another; returns {"wall_s",
    "records": node -> its done record}. Each record's `bundle`: size, seeds, started_s (the
    bundle's seconds before this seed started); its wall_s is the seed's own, as a solo node's."""
    start = time.perf_counter()
    members = [m for m in job.members if m.done is None]  # another run may have finished some
    seeds = [int(m.seed) for m in members]  # type: ignore[arg-type]
    records: dict[str, Any] = {}
    error: Exception | None = None
    for member in members:
        member.threads = job.threads  # the executor sets the job's share of the cores
        about = {"size": len(members), "seeds": seeds,
                 "started_s": round(time.perf_counter() - start, 3)}  # fmt: skip
        try:
            records[member.name] = execute_node(member, extra={"bundle": about})
        except Exception as err:  # noqa: BLE001 - one seed's failure must not lose the others'
            print(f"bundle {job.name}: {member.name} failed: {err}", file=sys.stderr, flush=True)
            error = error or err
            continue
        wall = records[member.name]["wall_s"]
        print(f"bundle {job.name}: {member.name} done ({wall:.1f} s)", file=sys.stderr, flush=True)
    if error is not None:
        raise error
    return {"wall_s": round(time.perf_counter() - start, 3), "records": records}
