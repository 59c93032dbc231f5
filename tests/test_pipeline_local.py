"""The local executor (the tiny preset's default): nodes in submitit worker processes side by
side, inline stages (no compute) in the invoking process, results the same as in process."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mlflow import MlflowClient

from ssmax.pipeline.__main__ import main
from ssmax.pipeline.run import plan
from ssmax.tracking import tracking_uri

pytestmark = pytest.mark.slow


def test_local_executor_runs_workers_and_inline_nodes(
    tmp_path: Path, shared_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    overrides = ["preset=smoke", "executor=local", "executor.workers=2",
                 "pipeline.variants=[a_softmax,b_ssmax]", f"paths.output_dir={tmp_path}",
                 f"paths.cache_dir={shared_cache}"]  # fmt: skip
    assert main(["run", *overrides]) == 0
    out = capsys.readouterr().out
    started = dict(re.findall(r"^run\s+(\S+)(.*)$", out, re.M))
    assert started["pretrain/a_softmax/seed0"].startswith(" (job ")  # a worker process
    assert started["rope_sft/b_ssmax/seed0"] == ""  # inline: no worker started for it
    _, jobs = plan(overrides)
    assert all(job.done is not None for job in jobs)  # every node has its result
    assert {job.name for job in jobs} == set(started)
    client = MlflowClient(tracking_uri(plan(overrides)[0]))
    exp = client.get_experiment_by_name(plan(overrides)[0].tracking.experiment)
    parent = client.search_runs([exp.experiment_id], "tags.kind = 'pipeline'")[0]
    assert parent.info.status == "FINISHED"
    children = client.search_runs(
        [exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'"
    )
    assert {r.data.tags["node"] for r in children} == set(started)
