"""Training nodes on the local SLURM cluster that SLURM interrupts: a preemption
(`job._interrupt()`), a real time-out (USR2 `signal_delay_s` before the limit, the limit cut
while training holds) and one requeue too many. Training waits at a step until the signal
comes (ssmax.lit.hold.HoldAtStep), so the signal lands mid-training whatever the machine's
speed. Each resumes from the checkpoint written at the signal, in the same MLflow run, with
no duplicate steps and the final weights of an uninterrupted run; the last one fails clearly.

All four jobs run at once (one CPU each), so the module costs about one training's wall time.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import submitit
import torch
from mlflow import MlflowClient

from ssmax.lit.hold import held_marker
from ssmax.pipeline.__main__ import main
from ssmax.pipeline.job import NodeJob
from ssmax.pipeline.run import plan
from ssmax.pipeline.slurm import _folder, submit
from tests.slurm_fixtures import SlurmCluster

pytestmark = pytest.mark.slurm

STEPS = 40  # past every hold (HOLDS): steps trained after each resume, compared bit for bit
SETTINGS = [
    "preset=smoke", "pipeline.variants=[a_softmax]", f"trainer.pretrain.max_steps={STEPS}",
    "trainer.checkpoint_every_n_steps=100000",  # only the signal's checkpoint to resume from
    "trainer.val_every_n_steps=100000", "trainer.log_every_n_steps=2",
    "trainer.deterministic=true", "executor=slurm",
]  # fmt: skip
# timeout_min <= 10: submitit counts the signal as a time-out (not a preemption). SLURM sends it
# signal_delay_s before the limit, checking limits only every half minute or so; a fixed limit
# let it land during a slow start-up (seen: 45 s after the start, before training). So the job
# starts with 10 min, training holds at a step, and only then is the limit cut to 1-2 min ahead
# (time_out_when_held): the signal lands mid-training however fast the machine. 120 s: the cut
# limit is less than 2 min ahead, so the signal is due at once (at SLURM's next check of limits)
# rather than up to a minute later (60 s), and the job has a minute's limit left to requeue.
TIMEOUT = ["executor.timeout_min=10", "executor.signal_delay_s=120", "executor.max_requeues=8"]
DEADLINE_S = 600.0


def overrides(out: Path, cache: Path, *extra: str) -> list[str]:
    return [*SETTINGS, f"paths.output_dir={out}", f"paths.cache_dir={cache}", *extra]


def submit_pretrain(out: Path, cache: Path, *extra: str) -> tuple[NodeJob, submitit.SlurmJob]:
    """Only the pretraining node of the DAG, as executor=slurm submits it."""
    cfg, jobs = plan(overrides(out, cache, *extra))
    (job,) = [j for j in jobs if j.stage == "pretrain"]
    sub = submit(cfg, [job], lambda: None, closer=False)
    return job, submitit.SlurmJob(folder=_folder(cfg), job_id=sub.submitted[job.name])


def mlflow_runs(out: Path) -> list:
    if not (out / "mlflow.db").exists():
        return []
    client = MlflowClient(f"sqlite:///{out}/mlflow.db")
    exp = client.get_experiment_by_name("ssmax-repro")
    return client.search_runs([exp.experiment_id], "tags.stage = 'pretrain'") if exp else []


def logged_steps(out: Path, key: str = "train/loss") -> list[int]:
    runs = mlflow_runs(out)
    if not runs:
        return []
    client = MlflowClient(f"sqlite:///{out}/mlflow.db")
    return [m.step for m in client.get_metric_history(runs[0].info.run_id, key)]


def wait_until(what: str, check, deadline_s: float = DEADLINE_S) -> None:  # noqa: ANN001
    end = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > end:
            pytest.fail(f"timed out after {deadline_s:.0f} s waiting for {what}")
        time.sleep(0.5)


HOLDS = {"preempted": 20, "timed_out": 30, "limit": 4}  # the step each job's training waits at


def hold_at(name: str) -> str:
    """Training waits after its step until a requeueing signal is pending (ssmax.lit.hold)."""
    return f"trainer.callbacks=[{{_target_: ssmax.lit.hold.HoldAtStep, step: {HOLDS[name]}}}]"


def interrupt_when_held(name: str, job: NodeJob, sjob: submitit.SlurmJob) -> None:
    wait_until(f"job {sjob.job_id} to hold training", held_marker(job.dir, HOLDS[name]).exists)
    sjob._interrupt()  # SIGTERM, then USR2: a preemption


def minutes(elapsed: str) -> float:
    """squeue's %M ([[days-]hours:]minutes:seconds) in minutes."""
    days, _, clock = elapsed.rpartition("-")
    seconds = sum(int(x) * 60**i for i, x in enumerate(reversed(clock.split(":"))))
    return int(days or 0) * 1440 + seconds / 60


def time_out_when_held(
    cluster: SlurmCluster, name: str, job: NodeJob, sjob: submitit.SlurmJob
) -> None:
    """Cut the limit of a job held in training so that SLURM's time-out signal comes within a
    minute or two; once it has been requeued, give the rest of the run its 10 minutes back."""
    wait_until(f"job {sjob.job_id} to hold training", held_marker(job.dir, HOLDS[name]).exists)
    ran = minutes(cluster.run("squeue", "-h", "-j", sjob.job_id, "-o", "%M").strip())
    limit = math.ceil(ran) + 1  # 1-2 min ahead: the signal (limit - 120 s) is due now
    cluster.run("scontrol", "update", f"JobId={sjob.job_id}", f"TimeLimit={limit}")
    wait_until(f"job {sjob.job_id} to be requeued at the signal", lambda: requeues(job))
    # check=False: a job that has finished already needs no more time
    cluster.run("scontrol", "update", f"JobId={sjob.job_id}", "TimeLimit=10", check=False)


@pytest.fixture(scope="module")
def interrupted(slurm_cluster, tmp_path_factory: pytest.TempPathFactory, shared_cache: Path):
    root = tmp_path_factory.mktemp("requeue")
    started = time.perf_counter()
    runs = {
        "straight": submit_pretrain(root / "straight", shared_cache),
        "preempted": submit_pretrain(root / "preempted", shared_cache, hold_at("preempted")),
        "timed_out": submit_pretrain(root / "timed_out", shared_cache, *TIMEOUT,
                                     hold_at("timed_out")),
        "limit": submit_pretrain(root / "limit", shared_cache, "executor.max_requeues=0",
                                 hold_at("limit")),
    }  # fmt: skip
    interrupt_when_held("limit", *runs["limit"])
    interrupt_when_held("preempted", *runs["preempted"])
    time_out_when_held(slurm_cluster, "timed_out", *runs["timed_out"])
    for name in ("straight", "preempted", "timed_out"):
        job = runs[name][0]
        wait_until(f"{name} to finish", lambda job=job: job.done is not None)
    wait_until("the limit job to fail", lambda: slurm_cluster.state(runs["limit"][1].job_id)
               in ("FAILED", "COMPLETED"), deadline_s=60)  # fmt: skip
    print(f"\nstraight, preempted, timed-out, limit jobs: {time.perf_counter() - started:.0f} s")
    return {"root": root, "runs": runs, "cluster": slurm_cluster, "cache": shared_cache}


def weights(job: NodeJob) -> dict[str, torch.Tensor]:
    return torch.load(Path(job.dir) / "model.pt", weights_only=True)


def requeues(job: NodeJob) -> list[dict]:
    path = Path(job.dir) / "requeue.json"
    return json.loads(path.read_text()) if path.exists() else []


@pytest.mark.parametrize(("name", "case"), [("preempted", "preempted"),
                                            ("timed_out", "timed-out")])  # fmt: skip
def test_interrupted_node_resumes_like_an_uninterrupted_one(
    interrupted: dict, name: str, case: str
) -> None:
    root, runs = interrupted["root"], interrupted["runs"]
    job, sjob = runs[name]
    log = Path(sjob.paths.stderr).read_text()
    assert f"this job is {case}" in log
    history = requeues(job)
    assert history, "no checkpoint at a signal"
    assert all(0 < h["step"] < STEPS for h in history)  # mid-training, at a step boundary
    assert history[0]["step"] == HOLDS[name] + 1  # the step boundary after the signal came
    resumed = [h for h in history if "resume_s" in h]
    assert resumed and all(h["first_step"] == h["step"] + 1 for h in resumed)
    print(f"\n{name}: requeued {len(history)}x; signal -> resumed job's first step: "
          + ", ".join(f"{h['resume_s']:.1f} s" for h in resumed))  # fmt: skip

    want, got = weights(runs["straight"][0]), weights(job)
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want)
    (run,) = mlflow_runs(root / name)  # one MLflow run across the requeues
    assert run.info.status == "FINISHED"
    steps = logged_steps(root / name)
    assert steps == sorted(set(steps)) == logged_steps(root / "straight")  # no duplicates/gaps
    assert len(logged_steps(root / name, "requeue/resume_s")) == len(resumed)


def test_requeue_limit_fails_the_node_clearly(interrupted: dict, capsys) -> None:
    root, (job, sjob) = interrupted["root"], interrupted["runs"]["limit"]
    assert interrupted["cluster"].state(sjob.job_id) == "FAILED"
    assert job.done is None
    message = f"{job.name}: not requeued again: already requeued 0 times, executor.max_requeues=0"
    error = "ssmax.pipeline.requeue.RequeueLimitError: "
    lines = [line for line in Path(sjob.paths.stderr).read_text().splitlines() if error in line]
    assert lines and message in lines[-1]  # the job's traceback ends with one clear line
    (run,) = mlflow_runs(root / "limit")
    assert run.info.status == "FAILED"
    # `status` names the node and shows that line in its log tail
    limit = overrides(root / "limit", interrupted["cache"], "executor.max_requeues=0")
    assert main(["status", *limit]) == 1
    out = capsys.readouterr().out
    assert f"failed   {job.name}" in out and message in out
