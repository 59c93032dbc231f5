"""System metrics (ssmax.tracking.system_metrics; the setting tracking.system_metrics): on by
default, every node's run of the smoke pipeline, training and eval alike, holds CPU, memory, disk
and network samples (a node shorter than the interval too: the last window is logged at stop); off,
a training run holds none; the sampler hands each window to its log and ends in bounded time; a
window's CPU reading covers that window; a resumed run's steps go on; a two-node run (two torchrun
"nodes" on this machine) holds each node's metrics under its label."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from ssmax.pipeline.run import plan
from ssmax.pipeline.stage_code import no_result
from ssmax.report.system_table import node_rows
from ssmax.tracking.store import default_store, tracking_uri
from ssmax.tracking.system_metrics import STOP_WAIT_S, SystemMetrics, node_label
from ssmax.train import train_config
from tests.conftest import make_cfg
from tests.ddp_helpers import ROOT, RUN, free_port

HOST = ("system/cpu_utilization_percentage", "system/system_memory_usage_megabytes",
        "system/disk_usage_percentage", "system/network_receive_megabytes",
        "system/process_memory_megabytes")  # fmt: skip


def test_the_sampler_logs_each_window_and_the_last_at_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logged: list[tuple[dict[str, float], int]] = []
    monitor = SystemMetrics(lambda m, s: logged.append((m, s)), interval_s=3600).start()
    monitor.stop()  # long before the first interval ends: its window is logged all the same
    assert [step for _, step in logged] == [0]
    assert set(HOST) <= set(logged[0][0]) and logged[0][0]["system/process_memory_megabytes"] > 0
    # a node label on multi-node runs; a log that fails does not end the sampler's owner
    assert node_label(2, 1) == "node1" and node_label(1, 0) is None
    stuck = threading.Event()
    slow = SystemMetrics(lambda m, s: stuck.wait(), interval_s=3600, node="node0").start()
    monkeypatch.setattr("ssmax.tracking.system_metrics.STOP_WAIT_S", 0.2)  # not 5 idle seconds
    slow.stop()  # its log hangs (a server away): stop returns after STOP_WAIT_S
    assert slow._thread.is_alive() and STOP_WAIT_S <= 10
    stuck.set()


def test_the_samplers_shape_no_result() -> None:
    # their code is left out of every fingerprint (tracking.* settings are: test_fingerprint)
    assert no_result("tracking/system_metrics.py") and no_result(
        "tracking/system_metrics_callback.py"
    )


def test_a_window_s_cpu_reading_covers_that_window() -> None:
    # a process's first psutil CPU reading is 0.0 (nothing to compare with): read at a
    # window's start, a fresh process's first window said 0 % however busy it was
    script = """
import threading
from ssmax.tracking.system_metrics import SystemMetrics
logged, done = [], threading.Event()
monitor = SystemMetrics(lambda m, s: (logged.append(m), done.set()), interval_s=0.2).start()
while not done.is_set():  # busy through the first window
    pass
monitor.stop()
print(logged[0]["system/cpu_utilization_percentage"])
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=300).stdout  # fmt: skip
    assert float(out) > 0


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
    result = train_config(cfg)
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


@pytest.mark.slow
def test_a_resumed_run_goes_on_after_its_system_steps(tmp_path: Path, shared_cache: Path) -> None:
    settings = ["preset=smoke", f"paths.output_dir={tmp_path}", f"paths.cache_dir={shared_cache}",
                "trainer.pretrain.max_steps=2"]  # fmt: skip
    first = train_config(make_cfg(*settings))
    again = train_config(make_cfg(*settings))  # the same folder: its run reopened
    assert again.run_id == first.run_id
    client = MlflowClient(default_store(tmp_path))
    history = client.get_metric_history(first.run_id, "system/cpu_utilization_percentage")
    steps = sorted(m.step for m in history)
    assert len(steps) >= 2 and steps == list(range(len(steps)))  # none logged twice


def _node(out: Path, cache: Path, node_rank: int, port: int) -> subprocess.Popen:
    """One process of a two-node run, as torchrun starts it on each node."""
    settings = ["preset=smoke", "trainer.accelerator=cpu", "trainer.progress_bar=false",
                "trainer.devices=1", "trainer.num_nodes=2", "trainer.pretrain.max_steps=2",
                "trainer.pretrain.batch_size=2", "trainer.sft.batch_size=2",
                "trainer.val_batches=1", f"paths.output_dir={out}",
                f"paths.cache_dir={cache}"]  # fmt: skip
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
                f"--node_rank={node_rank}", "--nproc_per_node=1", "--master_addr=127.0.0.1",
                f"--master_port={port}"]  # fmt: skip
    command = [*launcher, "-m", "ssmax.train", *settings]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip


@pytest.mark.slow
def test_each_node_of_a_multi_node_run_logs_its_own(tmp_path: Path, shared_cache: Path) -> None:
    port = free_port()
    nodes = [_node(tmp_path, shared_cache, rank, port) for rank in (0, 1)]
    for node in nodes:
        out, _ = node.communicate(timeout=600)
        assert node.returncode == 0, out[-3000:]
    run_id = (tmp_path / RUN / "mlflow_run_id").read_text().strip()
    client = MlflowClient(default_store(tmp_path))
    run = client.get_run(run_id)
    labelled = {k.replace("system/", f"system/node{n}/") for k in HOST for n in (0, 1)}
    assert labelled <= set(run.data.metrics)
    assert not set(HOST) & set(run.data.metrics)  # nothing unlabelled
    # the report: a row per machine of the node
    rows = node_rows(client, "pretrain/a_softmax/seed0", run)
    assert [r[0] for r in rows] == [f"pretrain/a_softmax/seed0 node{n}" for n in (0, 1)]
    assert all(float(r[2].replace(",", "")) > 0 for r in rows)  # the host's peak memory
