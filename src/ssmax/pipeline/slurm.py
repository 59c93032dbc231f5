"""SLURM executor: every node that is not cached becomes one sbatch job (submitit).

    run     check the profile, submit each node with `afterok` on its upstream jobs that are not
            done yet, submit one closing job (`afterany` on all of them) that ends the MLflow
            parent run, record the job ids, return. `executor.wait=true` then waits for them.
    status  each node: cached/done, queued/running (job id, SLURM state), failed (log tail),
            blocked (an input failed: SLURM cancelled it, kill_on_invalid_dep), to-run.

Job ids live in <output_dir>/pipeline/slurm_jobs.json, keyed by node name and fingerprint, so
that a re-invocation adopts queued/running jobs instead of submitting them again and resubmits
only nodes whose job ended without a done-marker. A done-marker, not a SLURM state, is what
makes a node finished: the same rule as the other executors.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ssmax.config import ConfigError
from ssmax.pipeline.declaration import load
from ssmax.pipeline.run import NodeJob, close_pipeline_run

Log = Callable[[str], None]
RESOURCE_KEYS = (
    "partition", "account", "qos", "timeout_min", "nodes", "gpus_per_node", "tasks_per_node",
    "cpus_per_task", "mem_gb", "constraint", "additional_parameters", "setup", "signal_delay_s",
)  # fmt: skip
# SLURM states of a job that is still queued or running (squeue's %T).
ACTIVE = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
    "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "STOPPED",
})  # fmt: skip
NEVER = "DependencyNeverSatisfied"  # squeue's reason for a job whose upstream failed
LOG_LINES = 12


# ---------------------------------------------------------------- profile: resources, checks


def stage_resources(cfg: DictConfig, stage: str) -> dict[str, Any]:
    """The profile's resources with the stage's own settings (executor.stages.<stage>) on top."""
    ex = OmegaConf.to_container(cfg.executor, resolve=True)
    res = {key: ex.get(key) for key in RESOURCE_KEYS}
    res.update((ex.get("stages") or {}).get(stage) or {})
    return res


def launcher_value(key: str, _root_: DictConfig) -> Any:
    """`${ssmax_slurm:KEY}` in conf/hydra/launcher/ssmax_slurm.yaml: the profile's resource for
    the stage of the run's objective (pretrain or sft)."""
    if "executor" not in _root_ or "partition" not in _root_.executor:
        raise ConfigError("hydra/launcher=ssmax_slurm needs a cluster profile: add "
                          "+executor/slurm/profile=<local|gpu8|...>")  # fmt: skip
    if key == "max_requeues":
        return int(_root_.executor.get("max_requeues", 3))
    res = stage_resources(_root_, "sft" if _root_.get("objective") == "sft" else "pretrain")
    if key == "gpus_per_node":
        return res[key] or None  # no --gpus-per-node=0 on GPU-less sites
    if key == "additional_parameters":
        return res[key] or {}
    return res[key]


def check_profile(cfg: DictConfig, jobs: list[NodeJob]) -> None:
    """Raise ConfigError (one line) on a profile that SLURM or Lightning would reject later."""
    requeues = cfg.executor.get("max_requeues")
    _require(isinstance(requeues, int) and requeues >= 0,
             f"executor.max_requeues={requeues} must be an integer >= 0")  # fmt: skip
    stages = {job.stage: job.trains for job in jobs}
    declared = load(str(cfg.pipeline.file)).stages
    for stage, extra in (cfg.executor.get("stages") or {}).items():
        _require(stage in declared, f"executor.stages.{stage}: unknown stage; allowed: "
                 f"{', '.join(declared)}")  # fmt: skip
        unknown = sorted(set(extra or {}) - set(RESOURCE_KEYS))
        _require(not unknown, f"executor.stages.{stage}: unknown keys {unknown}; allowed: "
                 f"{', '.join(RESOURCE_KEYS)}")  # fmt: skip
    for stage, trains in stages.items():
        _check_stage_resources(stage, stage_resources(cfg, stage), trains)
    for job in jobs:
        if job.trains and job.done is None:
            _check_batch(job, stage_resources(cfg, job.stage))
    _check_partitions(cfg, stages)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _check_stage_resources(stage: str, res: dict[str, Any], trains: bool) -> None:
    key = f"executor (stage {stage})"
    timeout = res["timeout_min"]
    _require(timeout is not None, f"{key}: timeout_min is missing: set the job time limit in "
             "minutes (executor.timeout_min or executor.stages.<stage>.timeout_min)")  # fmt: skip
    _require(timeout > 0, f"{key}: timeout_min={timeout} must be > 0")
    delay = res["signal_delay_s"]
    _require(delay is not None and 0 < delay < timeout * 60,
             f"{key}: signal_delay_s={delay} must be > 0 and less than timeout_min x 60 = "
             f"{timeout * 60} (the time-out signal comes that long before the limit)")  # fmt: skip
    for name in ("nodes", "tasks_per_node", "cpus_per_task"):
        _require(int(res[name] or 0) >= 1, f"{key}: {name}={res[name]} must be >= 1")
    gpus = int(res["gpus_per_node"] or 0)
    _require(gpus >= 0, f"{key}: gpus_per_node={gpus} must be >= 0")
    if not trains:  # evals, RoPE and the report run in one process
        _require(res["nodes"] == 1 and res["tasks_per_node"] == 1,
                 f"{key}: nodes={res['nodes']}, tasks_per_node={res['tasks_per_node']}; this "
                 "stage runs in one process: both must be 1")  # fmt: skip
        return
    # Lightning DDP under SLURM expects one task per device (it reads SLURM_NTASKS_PER_NODE).
    _require(gpus == 0 or res["tasks_per_node"] == gpus,
             f"{key}: tasks_per_node={res['tasks_per_node']} must equal gpus_per_node={gpus} "
             "(Lightning DDP runs one task per GPU)")  # fmt: skip


def _check_batch(job: NodeJob, res: dict[str, Any]) -> None:
    """trainer.devices must be the job's devices per node, and the global batch a multiple of
    batch_size x devices x nodes (the rest is gradient accumulation, see ssmax.train)."""
    cfg = OmegaConf.create(job.cfg_yaml)
    gpus, nodes = int(res["gpus_per_node"] or 0), int(res["nodes"])
    devices, num_nodes = cfg.trainer.devices, cfg.trainer.get("num_nodes", 1)
    _require(num_nodes in (1, nodes), f"{job.name}: trainer.num_nodes={num_nodes} but the "
             f"profile gives stage {job.stage} nodes={nodes}: leave trainer.num_nodes at 1 "
             "(the profile's nodes is used) or change the profile")  # fmt: skip
    per_node = gpus if gpus else res["tasks_per_node"]
    _require(devices == per_node, f"{job.name}: trainer.devices={devices} but the profile gives "
             f"{per_node} {'GPUs' if gpus else 'tasks'} per node to stage {job.stage}: set "
             f"trainer.devices={per_node} or change executor.stages.{job.stage}")  # fmt: skip
    objective = "sft" if job.module == "sft" else "pretrain"
    s = cfg.trainer[objective]
    per_update = s.batch_size * devices * nodes
    _require(s.global_batch % per_update == 0,
             f"{job.name}: trainer.{objective}.global_batch={s.global_batch} must be a multiple "
             f"of batch_size x devices x nodes = {s.batch_size} x {devices} x {nodes} = "
             f"{per_update} (the rest is gradient accumulation)")  # fmt: skip


def _check_partitions(cfg: DictConfig, stages: dict[str, bool]) -> None:
    """Unknown partitions, asked of the cluster when it answers (`sinfo`); else left to sbatch."""
    wanted = {stage_resources(cfg, s)["partition"] for s in stages} - {None}
    if not wanted or shutil.which("sinfo") is None:
        return
    out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        return
    known = {p.rstrip("*") for p in out.stdout.split()}
    for partition in sorted(wanted - known):
        raise ConfigError(f"executor.partition={partition!r} is unknown on this cluster; sinfo "
                          f"lists: {', '.join(sorted(known))}")  # fmt: skip


# ---------------------------------------------------------------- SLURM job states


def _client(*args: str) -> str:
    conf = os.environ.get("SLURM_CONF")
    if conf and not Path(conf).is_file():  # the clients would spend a minute finding that out
        raise ConfigError(f"cannot query SLURM ({args[0]}): SLURM_CONF={conf} does not exist "
                          "(is the cluster down?)")  # fmt: skip
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ConfigError(f"cannot query SLURM ({args[0]}): {err}") from err
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or [""])[-1]  # one line, not the whole story
        raise ConfigError(f"cannot query SLURM ({' '.join(args[:2])}): {last} "
                          "(is SLURM_CONF set?)")  # fmt: skip
    return out.stdout


def query_states(ids: list[str]) -> dict[str, tuple[str, str]]:
    """job id -> (SLURM state, reason). squeue knows every live job; sacct the ones squeue has
    forgotten (MinJobAge). A job neither knows is left out (lost: treated as not running)."""
    states: dict[str, tuple[str, str]] = {}
    if not ids:
        return states
    wanted = set(ids)
    for line in _client("squeue", "--me", "-h", "-t", "all", "-o", "%i|%T|%r").splitlines():
        job_id, state, reason = (line.split("|") + ["", ""])[:3]
        if job_id in wanted:
            states[job_id] = (state, reason)
    missing = [i for i in ids if i not in states]
    if missing and shutil.which("sacct"):
        out = _client("sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", ",".join(missing))
        for line in out.splitlines():
            job_id, _, state = line.partition("|")
            if job_id in wanted and state:
                states[job_id] = (state.split()[0], "")  # "CANCELLED by 0" -> CANCELLED
    return states


# ---------------------------------------------------------------- the job book (state file)


def book_path(cfg: DictConfig) -> Path:
    return Path(cfg.paths.output_dir) / "pipeline" / "slurm_jobs.json"


def _key(job: NodeJob) -> str:
    return f"{job.name}@{job.fingerprint}"


@contextmanager
def _locked_book(cfg: DictConfig) -> Iterator[dict[str, Any]]:
    """The book, read under an exclusive lock (two clients must not both submit a node) and
    written back atomically when the block ends."""
    path = book_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        book = read_book(cfg)
        yield book
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(book, indent=2, sort_keys=True))
        tmp.replace(path)


def read_book(cfg: DictConfig) -> dict[str, Any]:
    path = book_path(cfg)
    book = json.loads(path.read_text()) if path.exists() else {}
    return {"nodes": book.get("nodes", {}), "runs": book.get("runs", {})}


# ---------------------------------------------------------------- status


@dataclass
class NodeStatus:
    name: str
    state: str  # cached | done | queued | running | failed | blocked | to-run | unknown
    job_id: str | None = None
    slurm_state: str = ""
    reason: str = ""
    log: Path | None = None  # the job's stderr, for failed nodes

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running")


def node_states(
    cfg: DictConfig, jobs: list[NodeJob], book: dict[str, Any], ask_slurm: bool = True
) -> list[NodeStatus]:
    """Each node's state from its done-marker, its recorded job and that job's SLURM state.
    Without ask_slurm (SLURM unreachable) a node with a job but no done-marker is 'unknown'."""
    records = {job.name: book["nodes"].get(_key(job)) for job in jobs}
    ids = [r["job_id"] for r in records.values() if r]
    slurm = query_states(ids) if ids and ask_slurm else {}
    folder = _folder(cfg)
    out: dict[str, NodeStatus] = {}
    for job in jobs:  # inputs come first
        record = records[job.name]
        job_id = record["job_id"] if record else None
        state, reason = slurm.get(job_id, ("", "")) if job_id else ("", "")
        status = NodeStatus(job.name, "to-run", job_id, state, reason)
        upstream_bad = any(out[i].state in ("failed", "blocked") for i in job.input_dirs)
        if job.done is not None:
            status.state = "done" if record else "cached"
        elif job_id and not ask_slurm:
            status.state = "unknown"
        elif state in ACTIVE:
            status.state = "blocked" if reason == NEVER else (
                "queued" if state == "PENDING" else "running")  # fmt: skip
        elif job_id and (reason == NEVER or upstream_bad):
            status.state = "blocked"
        elif job_id:  # ended (or forgotten by SLURM) without a done-marker
            status.state = "failed"
            status.slurm_state = state or "UNKNOWN"
            status.log = _log_path(folder, job_id)
        elif upstream_bad:
            status.state = "blocked"
        out[job.name] = status
    return list(out.values())


def _folder(cfg: DictConfig) -> Path:
    return Path(cfg.paths.output_dir) / "pipeline" / "slurm"


def _log_path(folder: Path, job_id: str) -> Path:
    from submitit.core.utils import JobPaths

    paths = JobPaths(folder, job_id=job_id, task_id=0)
    return paths.stderr if paths.stderr.exists() else paths.stdout


def log_tail(path: Path | None, lines: int = LOG_LINES) -> str:
    if path is None or not path.exists():
        return "(no log: the job did not start)"
    return "\n".join(path.read_text(errors="replace").rstrip().splitlines()[-lines:])


def format_status(statuses: list[NodeStatus]) -> str:
    lines = []
    for s in statuses:
        job = f"job {s.job_id}" if s.job_id else ""
        slurm = f"{s.slurm_state} ({s.reason})" if s.reason not in ("", "None") else s.slurm_state
        lines.append(f"{s.state:<8} {s.name:<48} {job:<10} {slurm}".rstrip())
        if s.state == "failed":
            lines.append(f"         log: {s.log}")
            lines += [f"         | {line}" for line in log_tail(s.log).splitlines()]
    lines.append(summary(statuses))
    return "\n".join(lines)


def summary(statuses: list[NodeStatus]) -> str:
    order = ("cached", "done", "queued", "running", "failed", "blocked", "to-run", "unknown")
    counts = {s: sum(x.state == s for x in statuses) for s in order}
    return f"{len(statuses)} nodes: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)


def print_status(cfg: DictConfig, jobs: list[NodeJob]) -> int:
    """`status` for a pipeline run on SLURM; non-zero when a node failed or is blocked, or when
    SLURM cannot be asked (then what the disk knows is shown: done and cached nodes)."""
    book = read_book(cfg)
    try:
        statuses = node_states(cfg, jobs, book)
    except ConfigError as err:  # no cluster, SLURM_CONF unset, slurmctld down
        statuses = node_states(cfg, jobs, book, ask_slurm=False)
        print(format_status(statuses))
        print(f"SLURM could not be queried, so the nodes with a job are 'unknown': {err}")
        return 1
    print(format_status(statuses))
    return 1 if any(s.state in ("failed", "blocked") for s in statuses) else 0


# ---------------------------------------------------------------- submit


def _executor(cfg: DictConfig, res: dict[str, Any], name: str, deps: list[str], after: str):
    import submitit

    # submitit's own count of time-outs stays above ours: ssmax.pipeline.requeue decides.
    max_timeouts = int(cfg.executor.max_requeues) + 1
    executor = submitit.AutoExecutor(
        folder=_folder(cfg), cluster="slurm", slurm_max_num_timeout=max_timeouts
    )
    extra = dict(res["additional_parameters"] or {})
    if deps:  # kill_on_invalid_dep: cancel a dependant when its upstream fails (not pend forever)
        extra |= {"dependency": f"{after}:" + ":".join(deps), "kill_on_invalid_dep": "yes"}
    params = {
        "name": f"ssmax:{name}", "timeout_min": int(res["timeout_min"]), "nodes": res["nodes"],
        "tasks_per_node": res["tasks_per_node"], "cpus_per_task": res["cpus_per_task"],
        "mem_gb": res["mem_gb"], "slurm_partition": res["partition"],
        "slurm_account": res["account"], "slurm_qos": res["qos"],
        "slurm_constraint": res["constraint"], "slurm_additional_parameters": extra,
        "slurm_setup": list(res["setup"] or []),
        "gpus_per_node": res["gpus_per_node"] or None,  # no --gpus-per-node=0 on GPU-less sites
        # USR2 this long before the time limit: time to end the step and write a checkpoint.
        "slurm_signal_delay_s": res["signal_delay_s"],
    }  # fmt: skip
    executor.update_parameters(**{k: v for k, v in params.items() if v is not None})
    return executor


@dataclass
class Submission:
    statuses: list[NodeStatus]  # before submitting
    submitted: dict[str, str]  # node name -> new job id
    adopted: dict[str, str]  # node name -> job id already queued/running
    parent_run_id: str | None = None
    closer: str | None = None  # the job that closes the MLflow parent run


def submit(
    cfg: DictConfig, jobs: list[NodeJob], parent: Callable[[], str], closer: bool = True
) -> Submission:
    """Submit every node that is neither done nor queued/running; `parent()` starts the MLflow
    parent run (only called when there is something to submit). With closer, one more job
    closes that run once every node's job has ended."""
    with _locked_book(cfg) as book:
        statuses = node_states(cfg, jobs, book)
        by_name = {s.name: s for s in statuses}
        adopted = {s.name: s.job_id for s in statuses if s.active and s.job_id}
        todo = [j for j in jobs if by_name[j.name].state not in ("cached", "done", "queued",
                                                                 "running")]  # fmt: skip
        sub = Submission(statuses, {}, adopted)
        if not todo:
            return sub
        # A dependant left pending on a failed input (a site without kill_on_invalid_dep)
        # would never run: cancel it before its node is submitted again.
        stuck = [s.job_id for s in statuses if s.state == "blocked" and s.slurm_state in ACTIVE]
        if stuck:
            _client("scancel", *[i for i in stuck if i])
        sub.parent_run_id = parent()
        frozen = _snapshot_setup(cfg)
        ids = dict(adopted)
        for job in todo:  # inputs come first: their ids are known when a dependant is submitted
            res = stage_resources(cfg, job.stage)
            res["setup"] = [*frozen, *(res["setup"] or [])]
            deps = [ids[i] for i in job.input_dirs if i in ids]
            job.parent_run_id = sub.parent_run_id
            job.threads = int(res["cpus_per_task"])  # torch threads = the CPUs SLURM gave
            executor = _executor(cfg, res, job.name, deps, "afterok")
            if job.trains:  # checkpoint and requeue on USR2 (time-out, preempt)
                from ssmax.pipeline.requeue import TrainingNode  # imports Lightning: only here

                _set_num_nodes(job, int(res["nodes"]))
                node = TrainingNode(job, int(cfg.executor.max_requeues))
                sjob = executor.submit(node)
            else:
                sjob = executor.submit(_execute, job)
            ids[job.name] = sub.submitted[job.name] = str(sjob.job_id)
            book["nodes"][_key(job)] = {
                "node": job.name, "fingerprint": job.fingerprint, "job_id": str(sjob.job_id),
                "parent_run_id": sub.parent_run_id, "submitted": datetime.now().isoformat(),
            }  # fmt: skip
        if not closer:
            return sub
        # afterany: ends the MLflow run however the nodes end (cancelled ones included).
        res = stage_resources(cfg, "report") | {"gpus_per_node": 0, "nodes": 1,
                                                "tasks_per_node": 1}  # fmt: skip
        res["setup"] = [*frozen, *(res["setup"] or [])]
        closing = _executor(cfg, res, "close-run", list(ids.values()), "afterany").submit(
            close_run, OmegaConf.to_yaml(cfg), sub.parent_run_id, jobs, sorted(sub.submitted)
        )
        sub.closer = str(closing.job_id)
        book["runs"][sub.parent_run_id] = {"closer_job": sub.closer,
                                           "submitted": datetime.now().isoformat()}  # fmt: skip
    return sub


def _snapshot_setup(cfg: DictConfig) -> list[str]:
    """With executor.snapshot, the jobs import a copy of the code as it is now (see
    ssmax.pipeline.snapshot), not the checkout as it will be when they start."""
    if not cfg.executor.get("snapshot", False):
        return []
    from ssmax.pipeline.snapshot import setup_lines, snapshot

    return setup_lines(snapshot(cfg.paths.output_dir))


def _set_num_nodes(job: NodeJob, nodes: int) -> None:
    """Lightning's num_nodes from the profile (one process group over all the job's nodes).
    Not part of the fingerprint: the global batch, hence the result, does not depend on it."""
    cfg = OmegaConf.create(job.cfg_yaml)
    cfg.trainer.num_nodes = nodes
    job.cfg_yaml = OmegaConf.to_yaml(cfg)


def _execute(job: NodeJob) -> dict[str, Any]:
    from ssmax.pipeline.run import execute_node

    return execute_node(job)


def close_run(cfg_yaml: str, parent_run_id: str, jobs: list[NodeJob], submitted: list[str]) -> str:
    """The closing job: every node of this invocation has ended. Nodes it ran count as done,
    nodes finished by earlier runs as cached (linked child runs); the run ends FINISHED only
    when every node has its done-marker."""
    cfg = OmegaConf.create(cfg_yaml)
    states: dict[str, str] = {}
    for job in jobs:
        if job.done is not None:
            states[job.name] = "done" if job.name in submitted else "cached"
        elif any(states.get(i) in ("failed", "blocked") for i in job.input_dirs):
            states[job.name] = "blocked"
        else:
            states[job.name] = "failed"
    close_pipeline_run(cfg, parent_run_id, jobs, states)
    return "FAILED" if {"failed", "blocked"} & set(states.values()) else "FINISHED"


def wait(
    cfg: DictConfig, jobs: list[NodeJob], ids: list[str], log: Log, closer: str | None = None
) -> list[NodeStatus]:
    """Poll SLURM until no node job in ids (nor the closing job) is queued or running; log each
    node as it ends."""
    poll = float(cfg.executor.get("poll_s", 5))
    reported: set[str] = set()
    while True:
        statuses = node_states(cfg, jobs, read_book(cfg))
        for s in statuses:
            if s.job_id in ids and not s.active and s.name not in reported:
                reported.add(s.name)
                log(f"{s.state:<8} {s.name} (job {s.job_id}, {s.slurm_state or 'gone'})")
        closing = closer and query_states([closer]).get(closer, ("",))[0] in ACTIVE
        if not closing and not any(s.active and s.job_id in ids for s in statuses):
            return statuses
        time.sleep(poll)


# ---------------------------------------------------------------- the CLI's `run`


def run_cli(cfg: DictConfig, jobs: list[NodeJob], overrides: list[str], log: Log = print) -> int:
    """`python -m ssmax.pipeline run executor=slurm ...`: submit and return (or wait)."""
    from ssmax.tracking import git_commit, start_pipeline_run

    start = time.perf_counter()
    check_profile(cfg, jobs)

    def parent() -> str:
        name = f"pipeline-{cfg.preset.name}-{datetime.now():%Y%m%d-%H%M%S}"
        tags = {"kind": "pipeline", "preset": str(cfg.preset.name), "git_commit": git_commit(),
                "executor": "slurm"}  # fmt: skip
        return start_pipeline_run(cfg, name, tags)

    sub = submit(cfg, jobs, parent)
    watch = "python -m ssmax.pipeline status " + " ".join(overrides)
    if not sub.submitted and not sub.adopted:  # everything cached: like the other executors
        run_id = parent()
        close_pipeline_run(cfg, run_id, jobs, {j.name: "cached" for j in jobs})
        log(f"{len(jobs)} nodes: {len(jobs)} cached; nothing to submit")
        return 0
    for name, job_id in sub.submitted.items():
        log(f"submitted {job_id:>8}  {name}")
    for name, job_id in sub.adopted.items():
        log(f"in flight {job_id:>8}  {name} (submitted earlier: not resubmitted)")
    cached = sum(s.state in ("cached", "done") for s in sub.statuses)
    log(f"{len(jobs)} nodes: {cached} cached, {len(sub.submitted)} submitted, "
        f"{len(sub.adopted)} already in flight ({time.perf_counter() - start:.1f} s)")  # fmt: skip
    if sub.closer:
        log(f"MLflow run {sub.parent_run_id} is closed by job {sub.closer} when they end")
    if not cfg.executor.get("wait", False):
        log(f"watch: {watch}")
        return 0
    ids = [*sub.submitted.values(), *sub.adopted.values()]
    statuses = wait(cfg, jobs, ids, log, sub.closer)
    bad = [s for s in statuses if s.state in ("failed", "blocked")]
    for s in bad:
        if s.state == "failed":
            log(f"FAILED  {s.name} (job {s.job_id}, {s.slurm_state}); log {s.log}:\n"
                f"{log_tail(s.log)}")  # fmt: skip
    log(summary(statuses))
    log(f"wall time: {time.perf_counter() - start:.1f} s")
    return 1 if bad else 0


def run_slurm(jobs: list[NodeJob], cfg: DictConfig, log: Log) -> dict[str, str]:
    """The executor interface of ssmax.pipeline.executors: submit, wait, {name: state}; the
    caller owns the MLflow parent run (set on the jobs) and closes it."""
    check_profile(cfg, jobs)
    parent_run_id = jobs[0].parent_run_id if jobs else None
    sub = submit(cfg, jobs, lambda: parent_run_id, closer=False)
    ids = [*sub.submitted.values(), *sub.adopted.values()]
    statuses = wait(cfg, jobs, ids, log) if ids else sub.statuses
    mapping = {"done": "done", "cached": "cached", "failed": "failed", "blocked": "blocked"}
    return {s.name: mapping.get(s.state, "failed") for s in statuses}


__all__ = [
    "NodeStatus", "book_path", "check_profile", "node_states", "print_status", "query_states",
    "run_cli", "run_slurm", "stage_resources", "submit", "wait",
]  # fmt: skip
