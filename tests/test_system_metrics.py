"""System metrics (ssmax.tracking.system, tracking.system_metrics): on by default, every node's
run of the smoke pipeline, training and eval alike, holds CPU, memory, disk and network
samples (a node shorter than the interval too: the last window is logged at stop); off, a
training run holds none; the sampler hands each window to its log and ends in bounded time."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from ssmax.pipeline.run import plan
from ssmax.tracking import tracking_uri
from ssmax.tracking.system import STOP_WAIT_S, SystemMetrics, node_label
from ssmax.training import train
from tests.conftest import make_cfg

HOST = ("system/cpu_utilization_percentage", "system/system_memory_usage_megabytes",
        "system/disk_usage_percentage", "system/network_receive_megabytes",
        "system/process_memory_megabytes")  # fmt: skip


def test_the_sampler_logs_each_window_and_the_last_at_stop() -> None:
    logged: list[tuple[dict[str, float], int]] = []
    monitor = SystemMetrics(lambda m, s: logged.append((m, s)), interval_s=3600).start()
    monitor.stop()  # long before the first interval ends: its window is logged all the same
    assert [step for _, step in logged] == [0]
    assert set(HOST) <= set(logged[0][0]) and logged[0][0]["system/process_memory_megabytes"] > 0
    # a node label on multi-node runs; a log that fails does not end the sampler's owner
    assert node_label(2, 1) == "node1" and node_label(1, 0) is None
    stuck = threading.Event()
    slow = SystemMetrics(lambda m, s: stuck.wait(), interval_s=3600, node="node0").start()
    slow.stop()  # its log hangs (a server away): stop returns after STOP_WAIT_S
    assert slow._thread.is_alive() and STOP_WAIT_S <= 10
    stuck.set()


@pytest.mark.slow
def test_every_node_run_holds_system_metrics(smoke_pipeline: list[str]) -> None:
    cfg, jobs = plan(smoke_pipeline)
    client = MlflowClient(tracking_uri(cfg))
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    for node in ("pretrain/a_softmax/seed0", "sft/b_ssmax/seed0", "eval_niah/b_ssmax/seed0"):
        runs = client.search_runs([exp.experiment_id], f"tags.node = '{node}'")
        (run, *_) = [r for r in runs if "cached" not in r.data.tags]  # the one that ran it
        assert set(HOST) <= set(run.data.metrics), node
        history = client.get_metric_history(run.info.run_id, "system/cpu_utilization_percentage")
        assert history and [m.step for m in history] == list(range(len(history)))


@pytest.mark.slow
def test_off_a_training_run_holds_none(tmp_path: Path, shared_cache: Path) -> None:
    cfg = make_cfg("preset=smoke", f"paths.output_dir={tmp_path}",
                   f"paths.cache_dir={shared_cache}", "tracking.system_metrics=false")  # fmt: skip
    result = train(cfg)
    run = MlflowClient(tracking_uri(cfg)).get_run(result.run_id)
    assert "train/loss" in run.data.metrics
    assert not [k for k in run.data.metrics if k.startswith("system/")]


@pytest.mark.slow
def test_the_report_gives_each_nodes_peaks(
    smoke_pipeline_held: list[str], tmp_path: Path, capsys
) -> None:
    from ssmax.report.__main__ import main as report_main

    cfg, _ = plan(smoke_pipeline_held)
    assert report_main(["--output-dir", cfg.paths.output_dir, "--dest", str(tmp_path)]) == 0
    capsys.readouterr()
    text = (tmp_path / "report.md").read_text()
    section = text.split("## System (per node)")[1].split("\n## ")[0]
    rows = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:-1]]
            for r in section.splitlines() if r.startswith("| ") and "/seed" in r}  # fmt: skip
    process, host, gpu_memory, gpu_util = rows["pretrain/a_softmax/seed0"]
    assert float(process.replace(",", "")) > 0 and float(host.replace(",", "")) > 0
    gpu = torch.cuda.is_available()  # where it trained: numbers on a GPU, "-" without one
    assert (gpu_memory == "-", gpu_util == "-") == (not gpu, not gpu)
    assert {"sft/b_ssmax/seed0", "eval_niah/b_ssmax/seed0"} <= set(rows)
