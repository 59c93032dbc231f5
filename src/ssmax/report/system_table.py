"""The report's System section (`make report`): per node that ran, what its run's system
metrics (ssmax.tracking.system_metrics) say: this process's and the host's peak memory, and over its
GPUs the peak memory and the mean utilisation ("-" without a GPU or without the metrics)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from ssmax.tracking.sync import copy_id

COLUMNS = ["node", "process peak MB", "host peak MB", "GPU peak MB", "GPU mean utilisation %"]
PROCESS, HOST = "process_memory_megabytes", "system_memory_usage_megabytes"
GPU_MEMORY, GPU_UTIL = "_memory_usage_megabytes", "_utilization_percentage"


def _values(client: Any, run_id: str, keys: list[str]) -> list[float]:
    return [m.value for k in keys for m in client.get_metric_history(run_id, k)]


def node_rows(client: Any, node: str, run: Any) -> list[list[str]]:
    """The node's rows from its run's system metrics: one (system/<name>), or on a multi-node
    run one per machine (system/node<k>/<name>: "<node> node<k>"); [] when it has none."""
    machines: dict[str, list[str]] = defaultdict(list)
    for key in run.data.metrics:
        if key.startswith("system/"):
            machines[key.removeprefix("system/").rpartition("/")[0]].append(key)
    order = sorted(machines, key=lambda m: (len(m), m))  # node2 before node10
    return [_row(client, run.info.run_id, f"{node} {m}".strip(), machines[m]) for m in order]


def _row(client: Any, run_id: str, label: str, keys: list[str]) -> list[str]:
    name = {k: k.rsplit("/", 1)[1] for k in keys}

    def peak(match: Any) -> str:
        found = _values(client, run_id, [k for k in keys if match(name[k])])
        return f"{max(found):,.0f}" if found else "-"

    gpu = [k for k in keys if name[k].startswith("gpu_") and name[k].endswith(GPU_UTIL)]
    util = _values(client, run_id, gpu)
    return [label, peak(lambda n: n == PROCESS), peak(lambda n: n == HOST),
            peak(lambda n: n.startswith("gpu_") and n.endswith(GPU_MEMORY)),
            f"{statistics.mean(util):.0f}" if util else "-"]  # fmt: skip


def system_rows(client: Any, parent: Any) -> list[list[str]]:
    """A row per node run under the pipeline's run; a cached node's from the run that made it."""
    from mlflow.exceptions import MlflowException  # lazy: MLflow (~2 s), not for report --help

    query = f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'"
    children = client.search_runs([parent.info.experiment_id], query, max_results=5000)
    rows = []
    for child in sorted(children, key=lambda r: r.data.tags.get("node", "")):
        node, run = child.data.tags.get("node"), child
        source = child.data.tags.get("source_run_id")
        if node is None:
            continue
        if child.data.tags.get("cached") == "true" and source:
            try:  # offline, the source run is a copy in this store
                run = client.get_run(copy_id(client, source) or source)
            except MlflowException:
                continue  # made where this store does not reach
        rows += node_rows(client, node, run)
    return rows
