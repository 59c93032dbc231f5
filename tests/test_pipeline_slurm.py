"""executor=slurm on the local SLURM cluster: submit-and-return, adoption of queued jobs, the
same results as in process, everything logged on a tracking server as a cluster runs it, a
failing node and its dependants (tracked offline: each node's own store, merged into the
folder's by the closing job), profile checks before sbatch."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import shutil
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from ssmax.lit.hold import held_marker
from ssmax.pipeline.__main__ import main
from ssmax.pipeline.executors import run_pipeline
from ssmax.pipeline.run import compose_pipeline, plan
from ssmax.pipeline.slurm import node_states, read_book
from ssmax.tracking.store import tracking_uri
from tests.tracking_fixtures import (
    TrackingServer,
    assert_all_on_server,
    assert_nothing_secret_logged,
    leaks,
)

pytestmark = pytest.mark.slurm
B_ONLY = "pipeline.variants=[b_ssmax]"  # 8 nodes: enough for failures and profile checks
# training held after step 3 (once per node folder) until the test kills it: ssmax.lit.hold
HOLD = "trainer.callbacks=[{_target_:ssmax.lit.hold.HoldAtStep,step:3}]"
# (f) pulls in (a): a cross-variant edge, a switch and every stage in 15 nodes, a third of
# the full DAG (each SLURM job starts an interpreter: ~13 s of imports on 2 cores)
F_AND_A = "pipeline.variants=[f_switch_during_pretrain]"
NODES = 15


def smoke(out: Path, cache: Path, *extra: str) -> list[str]:
    """The smoke preset (unless extra names another) on SLURM, into out."""
    preset = [] if any(e.startswith("preset=") for e in extra) else ["preset=smoke"]
    return [
        *preset, f"paths.output_dir={out}", f"paths.cache_dir={cache}",
        "executor=slurm", "executor.poll_s=1", *extra,
    ]  # fmt: skip


def held(out: Path) -> bool:
    return any(out.glob(f"pipeline/nodes/**/{held_marker('', 3)}"))


def job_count(cluster) -> int:  # noqa: ANN001 - SlurmCluster
    """Every job the cluster has seen (MinJobAge keeps finished ones listed)."""
    return len(cluster.run("squeue", "-h", "-t", "all", "-o", "%i").split())


def done_records(out: Path) -> dict[str, dict]:
    records = [json.loads(p.read_text()) for p in (out / "pipeline" / "nodes").rglob("done.json")]
    return {r["node"]: r for r in records}


def parent_runs(overrides: list[str]) -> list:
    cfg, _ = plan(overrides)
    client = MlflowClient(tracking_uri(cfg))
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    return client.search_runs([exp.experiment_id], "tags.kind = 'pipeline'")


@pytest.fixture(scope="module")
def smoke_dag(
    slurm_cluster,  # noqa: ANN001
    tracking_server: TrackingServer,
    tmp_path_factory: pytest.TempPathFactory,
    shared_cache: Path,
) -> dict:
    """The smoke DAG on SLURM, tracked by a tracking server: submitted (the client returns),
    re-invoked while queued, then waited for with `--wait`."""
    out = tmp_path_factory.mktemp("slurm")
    uri = tracking_server.uri
    overrides = smoke(out, shared_cache, F_AND_A, f"tracking.tracking_uri={uri}")
    facts: dict = {"overrides": overrides, "out": out, "server": tracking_server}
    before = job_count(slurm_cluster)
    cfg, jobs = plan(overrides)
    facts["tracked"] = (cfg.tracking.experiment, {job.name for job in jobs})  # the server check
    start = time.perf_counter()
    assert run_pipeline(cfg, jobs, overrides, log=lambda line: None) == 0  # the generic runner
    facts["submit_s"] = time.perf_counter() - start
    facts["right_after"] = [s.state for s in node_states(cfg, jobs, read_book(cfg))]
    facts["submitted"] = job_count(slurm_cluster) - before
    assert main(["run", *overrides]) == 0  # while queued/running: adopts, submits nothing
    facts["resubmitted_while_queued"] = job_count(slurm_cluster) - before - facts["submitted"]
    with contextlib.redirect_stdout(io.StringIO()) as said:
        assert main(["run", *overrides, "--wait"]) == 0
    facts["wait_said"] = said.getvalue()
    slurm_s = time.perf_counter() - start
    # --wait adopted the first invocation's jobs: it also waits for that run's closing job
    facts["runs_after_wait"] = [r.info.status for r in parent_runs(overrides)]
    facts["resubmitted_by_wait"] = job_count(slurm_cluster) - before - facts["submitted"]
    print(
        f"\nsmoke DAG on SLURM: submit {facts['submit_s']:.1f} s, "
        f"until every job ended {slurm_s:.0f} s"
    )
    return facts


def test_client_submits_and_returns(smoke_dag: dict) -> None:
    assert smoke_dag["submitted"] == NODES + 1  # one job per node, and the job closing the run
    assert set(smoke_dag["right_after"]) <= {"queued", "running", "done"}
    assert "queued" in smoke_dag["right_after"]  # it did not wait for them


def test_waiting_says_how_far_the_run_is(smoke_dag: dict) -> None:
    """`--wait` says each node it waits for as it ends, with the nodes ended of those and,
    while some are left, the time left at the run's pace (ssmax.pipeline.progress)."""
    ended = re.findall(r"^done +\S+ \(job \d+, (?:COMPLETED|ending); (\d+)/(\d+)(, ~.+ left)?\)$",
                       smoke_dag["wait_said"], re.MULTILINE)  # fmt: skip
    assert ended, smoke_dag["wait_said"]  # a chain of jobs outlasts two in-process invocations
    n = len(ended)
    assert [(int(k), int(of)) for k, of, _ in ended] == [(k, n) for k in range(1, n + 1)]
    assert ended[-1][2] == "", ended  # nothing left: no estimate


def test_reinvoking_adopts_jobs_in_flight(smoke_dag: dict) -> None:
    assert smoke_dag["resubmitted_while_queued"] == 0
    assert smoke_dag["resubmitted_by_wait"] == 0


def test_same_fingerprints_and_report_as_in_process(
    smoke_dag: dict, smoke_pipeline: list[str]
) -> None:
    # beside the run's in-process smoke pipeline (conftest: asked for here, not by smoke_dag,
    # so that another worker has most likely made it by now)
    inproc_dir = Path(compose_pipeline(smoke_pipeline).paths.output_dir)
    slurm, inproc = done_records(smoke_dag["out"]), done_records(inproc_dir)
    assert len(slurm) == NODES and len(inproc) == 45
    # the same nodes as in the full in-process DAG; the report covers fewer variants here
    assert {n: r["fingerprint"] for n, r in slurm.items() if n != "report"} == {
        n: inproc[n]["fingerprint"] for n in slurm if n != "report"
    }
    got, want = slurm["report"]["outputs"]["results"], inproc["report"]["outputs"]["results"]
    assert set(got) == {"a_softmax", "f_switch_during_pretrain"} < set(want)
    for variant in got:
        metrics = want[variant]
        assert got[variant].keys() == metrics.keys()
        for name, by_seed in metrics.items():  # seed -> value
            # Same seeds, CPU, but 1 torch thread per SLURM job vs the test process's threads:
            # reductions may sum in another order, so allow float noise.
            mine = got[variant][name]
            assert mine.keys() == by_seed.keys()
            assert all(
                math.isclose(mine[seed], value, rel_tol=1e-4, abs_tol=1e-6)
                for seed, value in by_seed.items()
            ), (variant, name, mine, by_seed)


def test_everything_logged_on_the_server(smoke_dag: dict) -> None:
    """The jobs logged in as the submitting process did (sbatch passes its environment on)."""
    server = smoke_dag["server"]
    experiment, nodes = smoke_dag["tracked"]
    assert_all_on_server(server.uri, server.artifacts, smoke_dag["out"], experiment, nodes)


def test_no_password_in_any_file_the_jobs_wrote(smoke_dag: dict) -> None:
    """Not in the sbatch scripts, submitit's pickles and logs, the node folders, the report,
    the server's store and log; nor in a param or tag."""
    out, server = smoke_dag["out"], smoke_dag["server"]
    scripts = list((out / "pipeline" / "slurm").rglob("*_submission.sh"))
    assert scripts and list((out / "pipeline" / "slurm").rglob("*.pkl"))  # what was searched
    assert leaks(server, out) == []
    assert_nothing_secret_logged(server, smoke_dag["tracked"][0])


def test_after_completion_nothing_is_submitted(smoke_dag: dict, slurm_cluster, capsys) -> None:
    before = job_count(slurm_cluster)
    assert main(["run", *smoke_dag["overrides"]]) == 0
    assert job_count(slurm_cluster) == before
    assert main(["status", *smoke_dag["overrides"]]) == 0
    out = capsys.readouterr().out
    assert "nothing to submit" in out and f"{NODES} nodes: {NODES} done" in out
    # The first invocation's run was closed by its closing job before `--wait` returned.
    assert smoke_dag["runs_after_wait"] and set(smoke_dag["runs_after_wait"]) == {"FINISHED"}
    assert {r.info.status for r in parent_runs(smoke_dag["overrides"])} == {"FINISHED"}


def test_status_without_slurm_shows_what_is_on_disk(
    smoke_dag: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    # A copy of the finished DAG where the report's job has not written its done-marker yet
    # (in flight when SLURM went away), then a client that cannot reach any slurmctld.
    out = tmp_path / "copy"
    shutil.copytree(smoke_dag["out"], out)
    overrides = [o for o in smoke_dag["overrides"] if not o.startswith("paths.output_dir=")]
    overrides.append(f"paths.output_dir={out}")
    _, jobs = plan(overrides)
    (report,) = [j for j in jobs if j.stage == "report"]
    (Path(report.dir) / "done.json").unlink()
    for conf, why in [
        (None, "Could not establish a configuration source"),
        (tmp_path / "gone.conf", f"SLURM_CONF={tmp_path / 'gone.conf'} does not"),
    ]:
        if conf is None:  # no cluster configured at all
            monkeypatch.delenv("SLURM_CONF")
        else:  # the cluster's directory is gone
            monkeypatch.setenv("SLURM_CONF", str(conf))
        assert main(["status", *overrides]) == 1
        out_text = capsys.readouterr().out
        assert why in out_text.splitlines()[-1]
    lines = out_text.splitlines()
    assert lines[-2] == f"{NODES} nodes: {NODES - 1} done, 1 unknown"
    assert lines[-1].startswith("SLURM could not be queried, so the nodes with a job are "
                                "'unknown': cannot query SLURM (squeue")  # fmt: skip
    assert any(line.split()[:2] == ["unknown", "report"] for line in lines)
    assert sum(line.startswith("done ") for line in lines) == NODES - 1


def test_failed_node_blocks_its_dependants(
    slurm_cluster, tmp_path_factory: pytest.TempPathFactory, shared_cache: Path, capsys
) -> None:
    out = tmp_path_factory.mktemp("slurm-fail")
    # Planning passes, the SFT job raises in SLURM (tests.faults.FailSFT; a setting that made
    # SFT fail there, one SFT example, is refused at planning since 2026-11-29).
    fail_sft = "trainer.callbacks=[{_target_:tests.faults.FailSFT}]"
    overrides = smoke(out, shared_cache, B_ONLY, fail_sft, "tracking.mode=offline")
    assert main(["run", *overrides, "--wait"]) == 1
    capsys.readouterr()
    assert main(["status", *overrides]) == 1
    status = capsys.readouterr().out
    rows = [line.split() for line in status.splitlines()]
    lines = {r[1]: r[0] for r in rows if len(r) > 1 and r[0] in ("done", "failed", "blocked")}
    assert lines["sft/b_ssmax/seed0"] == "failed"
    assert lines["rope_sft/b_ssmax/seed0"] == lines["eval_niah/b_ssmax/seed0"] == "blocked"
    assert lines["export/b_ssmax/seed0"] == "blocked"  # it reads the SFT model
    assert lines["eval_loss/b_ssmax/seed0"] == "done"
    assert "log: " in status and "Error" in status  # the tail of the job's stderr
    assert lines["report"] == "blocked" and "CANCELLED" in status  # kill_on_invalid_dep
    records = done_records(out)
    assert "sft/b_ssmax/seed0" not in records and "report" not in records
    assert "eval_loss/b_ssmax/seed0" in records
    (parent,) = parent_runs(overrides)  # in the folder's store: offline, nodes kept their own
    assert parent.info.status == "FAILED"
    nodes = out / "pipeline" / "nodes"
    stores = {"/".join(p.relative_to(nodes).parts[:2]) for p in nodes.rglob("mlflow.db")}
    assert {"pretrain/b_ssmax", "eval_loss/b_ssmax"} <= stores  # sft's went with its folder
    client = MlflowClient(tracking_uri(plan(overrides)[0]))  # merged: the failed job's run too
    query = f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'"
    children = client.search_runs([parent.info.experiment_id], query)
    states = {c.data.tags["node"]: c.info.status for c in children}
    assert states["pretrain/b_ssmax/seed0"] == states["eval_loss/b_ssmax/seed0"] == "FINISHED"

    # Re-invoking resubmits the failed node and its dependants, nothing else.
    cfg, jobs = plan(overrides)
    old = {n["node"]: n["job_id"] for n in read_book(cfg)["nodes"].values()}
    assert main(["run", *overrides]) == 0
    new = {n["node"]: n["job_id"] for n in read_book(cfg)["nodes"].values()}
    changed = {name for name in new if new[name] != old.get(name)}
    assert changed == {"sft/b_ssmax/seed0", "rope_sft/b_ssmax/seed0",
                       "eval_niah/b_ssmax/seed0", "export/b_ssmax/seed0", "report"}  # fmt: skip
    slurm_cluster.run("scancel", *(new[name] for name in changed))  # no need to fail again


def test_a_job_killed_on_the_cluster_leaves_no_run_running(
    slurm_cluster, tmp_path_factory: pytest.TempPathFactory, shared_cache: Path, capsys
) -> None:
    """A node's job killed on the cluster (scancel --signal=KILL: its processes die at once,
    nothing ends its MLflow run) while the pipeline runs there; the next run closes that run in
    one line, resubmits what is left and completes, and no run stays RUNNING (issue 44)."""
    from ssmax.tracking.client import Client
    from ssmax.tracking.liveness import SLURM_JOB

    out = tmp_path_factory.mktemp("slurm-killed")
    # the pretraining and the SFT that reads it: a killed node and what is left after it (the
    # whole DAG on SLURM: test_client_submits_and_returns)
    overrides = smoke(out, shared_cache, B_ONLY, "pipeline.targets=[sft]")
    assert main(["run", *overrides, HOLD]) == 0  # submitted; held after step 3 till killed
    cfg, _ = plan(overrides)
    target = next(n["job_id"] for n in read_book(cfg)["nodes"].values()
                  if n["node"] == "pretrain/b_ssmax/seed0")  # fmt: skip
    client = Client(tracking_uri(cfg))
    deadline = time.monotonic() + 600  # a condition polled, however fast the machine
    while not held(out):
        assert time.monotonic() < deadline, f"job {target} never reached step 3"
        time.sleep(0.5)
    (killed,) = client.search_runs(
        [client.get_experiment_by_name(cfg.tracking.experiment).experiment_id],
        f"attributes.status = 'RUNNING' and tags.`{SLURM_JOB}` = '{target}'",
    )
    slurm_cluster.run("scancel", "--signal=KILL", "--full", target)
    while slurm_cluster.state(target) in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline, f"job {target} did not end"
        time.sleep(0.5)
    left = client.get_run(killed.info.run_id)
    assert left.info.status == "RUNNING", (left.info, left.data.tags)  # left open by the kill
    capsys.readouterr()
    assert main(["run", *overrides, "--wait"]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("closed ")]
    assert len(said) == 1 and "1 node run" in said[0], said
    exp = client.get_experiment_by_name(cfg.tracking.experiment).experiment_id
    assert client.search_runs([exp], "attributes.status = 'RUNNING'") == []
    # the resubmitted node resumed the same run and ended it
    assert client.get_run(killed.info.run_id).info.status == "FINISHED"
    assert set(done_records(out)) == {"pretrain/b_ssmax/seed0", "sft/b_ssmax/seed0"}


def test_a_node_whose_slurmd_died_mid_run_is_recovered_by_the_next_run(
    slurm_cluster, tmp_path_factory: pytest.TempPathFactory, shared_cache: Path, capsys
) -> None:
    """The compute node's slurmd killed (SIGKILL) while a pipeline trains there: the job's
    processes live on unheard, slurmctld marks the node DOWN after SlurmdTimeout and requeues
    its jobs, and kills the stale processes when slurmd comes back. The next run completes,
    says in at most one line what it closed, and no run stays RUNNING (issue 44 item 3)."""
    from ssmax.tracking.client import Client
    from ssmax.tracking.liveness import SLURM_JOB

    out = tmp_path_factory.mktemp("slurm-slurmd")
    # the pretraining alone (and the closing job): what follows it is the other tests' work
    overrides = smoke(out, shared_cache, B_ONLY, "pipeline.targets=[pretrain]")
    assert main(["run", *overrides, HOLD]) == 0  # a requeued try (same folder) trains on
    cfg, _ = plan(overrides)
    target = next(n["job_id"] for n in read_book(cfg)["nodes"].values()
                  if n["node"] == "pretrain/b_ssmax/seed0")  # fmt: skip
    client = Client(tracking_uri(cfg))
    exp = client.get_experiment_by_name(cfg.tracking.experiment).experiment_id
    deadline = time.monotonic() + 900  # conditions polled, however fast the machine
    while not held(out):
        assert time.monotonic() < deadline, f"job {target} never reached step 3"
        time.sleep(0.5)
    (held_run,) = client.search_runs([exp], f"attributes.status = 'RUNNING' and "
                                 f"tags.`{SLURM_JOB}` = '{target}'")  # fmt: skip
    conf = slurm_cluster.dir / "etc" / "slurm.conf"
    text = conf.read_text()  # a node silent for 10 s is DOWN (the cluster's 60 s: a minute idle)
    conf.write_text(text.replace("SlurmdTimeout=60", "SlurmdTimeout=10"))
    slurm_cluster.run("scontrol", "reconfigure")
    slurm_cluster.kill_slurmd()
    try:  # SlurmdTimeout on: the node DOWN, its jobs requeued or failed
        while "down" not in slurm_cluster.run("sinfo", "-h", "-o", "%T"):
            assert time.monotonic() < deadline, "the node never went DOWN"
            time.sleep(1)
        assert slurm_cluster.state(target) != "RUNNING"
    finally:
        conf.write_text(text)
        slurm_cluster.start_slurmd()
        slurm_cluster.run("scontrol", "reconfigure")
    capsys.readouterr()
    assert main(["run", *overrides, "--wait"]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("closed ")]
    assert len(said) <= 1, said
    assert client.search_runs([exp], "attributes.status = 'RUNNING'") == []
    # the held run was resumed to its end by the node's next job, or closed as dead (and said)
    left = client.get_run(held_run.info.run_id)
    assert left.info.status in ("FINISHED", "KILLED"), left.info
    if left.info.status == "KILLED":
        assert said and "node run" in said[0], said
    assert set(done_records(out)) == {"pretrain/b_ssmax/seed0"}
    print(f"held run {left.info.status}; {said}; job {target}: {slurm_cluster.state(target)}")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["executor.partition=nope"], "executor.partition='nope' is unknown on this cluster"),
        (["executor.timeout_min=null"], "timeout_min is missing"),
        (["+executor.stages.pretrain={gpus_per_node:2,tasks_per_node:1}"],
         "tasks_per_node=1 must equal gpus_per_node=2"),
        (["preset=paper", "executor/slurm/profile=gpu8"],
         "trainer.devices=1 but the profile gives 8 GPUs per node to stage pretrain"),
        (["preset=paper", "executor/slurm/profile=gpu8", "trainer.devices=8",
          "trainer.pretrain.global_batch=1000"], "global_batch=1000 must be a multiple"),
        (["preset=paper", "executor/slurm/profile=gpu8", "trainer.devices=8",
          "trainer.sft.batch_size=16"],  # as docs/cluster-and-tracking.md says
         "executor.partition='gpu' is unknown"),  # the batch math holds; the site does not
        (["+executor.stages.pretrain={nodes:2}"],  # the smoke preset: 4 sequences an update
         "global_batch=4 must be a multiple of batch_size x devices x nodes = 4 x 1 x 2 = 8"),
        (["+executor.stages.pretrain={nodes:2}", "trainer.num_nodes=3",
          "trainer.pretrain.global_batch=12", "trainer.sft.global_batch=12"],
         "trainer.num_nodes=3 but the profile gives stage pretrain nodes=2"),
        (["executor.signal_delay_s=0"], "signal_delay_s=0 must be > 0"),
        (["executor.max_requeues=-1"], "executor.max_requeues=-1 must be >= 0"),
    ],
)  # fmt: skip
def test_bad_profile_fails_before_submitting(
    extra: list[str], message: str, slurm_cluster, tmp_path: Path, capsys
) -> None:
    before = job_count(slurm_cluster)
    assert main(["run", *smoke(tmp_path, tmp_path / "cache", B_ONLY, *extra)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert job_count(slurm_cluster) == before
    # nothing but the (released, empty) run lock the invocation held while it checked
    folder = tmp_path / "pipeline"
    assert not folder.exists() or [p.name for p in folder.iterdir()] == ["run.lock"]


def where_code_is() -> tuple[str, str, str]:
    """Run in a job: where the job imported ssmax and its configs from, and the commit its
    records would name."""
    import ssmax.config.compose  # ssmax is a namespace package: its modules tell where they're from
    import ssmax.tracking.manifest

    module, conf = ssmax.config.compose.__file__, str(ssmax.config.compose.CONF_DIR)
    return module, conf, ssmax.tracking.manifest.git_commit()


def test_snapshot_jobs_import_the_code_as_submitted(slurm_cluster, tmp_path: Path) -> None:
    import cloudpickle

    from ssmax.pipeline import slurm as slurm_executor
    from ssmax.pipeline.snapshot import REPO, code_digest
    from ssmax.tracking.manifest import git_commit

    cfg, _ = plan(smoke(tmp_path, tmp_path / "cache", B_ONLY, "executor.snapshot=true"))
    setup = slurm_executor._snapshot_setup(cfg)
    (snap,) = (tmp_path / "pipeline" / "snapshots").iterdir()
    assert snap.name == code_digest()[:16] and slurm_executor._snapshot_setup(cfg) == setup
    assert (snap / "data" / "embedded").is_dir()  # linked: the corpus is found beside the code
    res = slurm_executor.stage_resources(cfg, "report")
    res["setup"] = setup
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the job need not find `tests`
    job = slurm_executor._executor(cfg, res, "where", [], "afterok").submit(where_code_is)
    module, conf, commit = job.result()
    assert module == str(snap / "src" / "ssmax" / "config" / "compose.py")
    assert conf == str(snap / "conf") and not conf.startswith(str(REPO / "conf"))
    assert commit == git_commit()  # the copy is no repository: the submitting checkout's
