"""On-disk state of nodes: one folder per (node, fingerprint), a done-marker written last.

    <output_dir>/pipeline/nodes/<stage>/<variant>/seed<k>/<fingerprint[:16]>/
        config.yaml   the node's resolved config
        done.json     {"fingerprint", "outputs", "run_id", "wall_s", "flops", and what made
                      it: "git_commit", "packages_sha", "host", "cpu", "gpus", "slurm_job_id"
                      (in a SLURM job; ssmax.tracking.manifest)}: written atomically, last

    <output_dir>/pipeline/mlflow_run.json
                  {"run_id", "run_name", "tracking_uri"}: the MLflow run of the invocation
                  last started on this folder (what `python -m ssmax.report` rebuilds; a
                  server's latest pipeline run may be another folder's)

A folder without done.json is unfinished work (a training node resumes from its checkpoint
there); one with done.json of the same fingerprint is a result. Old fingerprints' folders stay,
so going back to an earlier setting is a cache hit.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from ssmax.files.atomic import atomic_write_json, remove_temporaries

DONE = "done.json"


def node_dir(output_dir: str | Path, name: str, fingerprint: str) -> Path:
    return Path(output_dir) / "pipeline" / "nodes" / name / fingerprint[:16]


def read_record(directory: Path) -> dict[str, Any] | None:
    """The done record of this folder, whatever its fingerprint (None while unfinished)."""
    path = directory / DONE
    return json.loads(path.read_text()) if path.exists() else None


def module_of(record: dict[str, Any]) -> str | None:
    """The stage module (ssmax.stages.<module>) that wrote this done record. A record written
    before records named it: its node's stage where a module has that name (so it was for every
    stage whose outputs a report read: pipelines/*.yaml), else None."""
    if record.get("module"):
        return str(record["module"])
    stage = record["node"].split("/")[0]
    return stage if importlib.util.find_spec(f"ssmax.stages.{stage}") is not None else None


def read_done(directory: Path, fingerprint: str) -> dict[str, Any] | None:
    """The done record if this folder holds a finished result of exactly this fingerprint."""
    record = read_record(directory)
    return record if record is not None and record.get("fingerprint") == fingerprint else None


def write_done(directory: Path, record: dict[str, Any]) -> None:
    atomic_write_json(directory / DONE, record, indent=2, sort_keys=True)


PIPELINE_RUN = "mlflow_run.json"


def pipeline_run_path(output_dir: str | Path) -> Path:
    return Path(output_dir) / "pipeline" / PIPELINE_RUN


def write_pipeline_run(output_dir: str | Path, run_id: str, run_name: str, uri: str) -> None:
    """Record the folder's pipeline run (its invocations hold the folder's lock: one at once)."""
    record = {"run_id": run_id, "run_name": run_name, "tracking_uri": uri}
    atomic_write_json(pipeline_run_path(output_dir), record, indent=2)


def read_pipeline_run(output_dir: str | Path) -> dict[str, str] | None:
    """The record of the pipeline run last started on this folder, None before any."""
    path = pipeline_run_path(output_dir)
    return json.loads(path.read_text()) if path.exists() else None


def remove_partial_records(output_dir: str | Path) -> list[Path]:
    """The temporaries a pipeline killed while writing its own records left; for the holder of
    the folder's lock (ssmax.pipeline.run_lock), the one writer of these records."""
    return remove_temporaries(Path(output_dir) / "pipeline", names=(PIPELINE_RUN,), recursive=False)
