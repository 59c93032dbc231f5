"""One bundle of seeds as one job (ssmax.pipeline.bundle.group.BundleJob): trained together by
ssmax.lit.bundle.run.BundleRun, each seed's node written as its solo node writes it.

- before: each member's folder opened as for a solo node (ssmax.pipeline.run.open_node), its
  plan (ssmax.lit.plan.TrainingPlan: the weights it starts from, where its data begins) as its
  stage (one whose SPEC says bundle="train") gives it to ssmax.lit.trainer.train (seed_start),
  its config.yaml as a solo run records it, its MLflow run made or reopened by the logger a
  solo run makes (ssmax.lit.trainer.build_logger: params, datasets, tags, mlflow_run_id),
  tagged `bundle`;
- while training (SeedWriter, the run's hooks): each seed's train/loss, train/lr,
  train/tokens_seen, train/tokens_per_s and its law's learned values at trainer.log_every_n_steps
  and val/loss at the steps a solo run logs them; at trainer.save_weights_at its
  model_step<N>.pt and data_step<N>.json in its folder; every trainer.checkpoint_every_n_steps
  and after the last step a checkpoint of the whole bundle (BundleRun.state_dict, written
  atomically) in the bundle's folder, <output_dir>/pipeline/bundles/<stage>/<variant>/<seedless
  fingerprint>/<seeds' digest>.ckpt;
- after: seed by seed, model.pt, its run FINISHED, its done record (its stage's outputs, with
  `bundle`: size, seeds, the bundle's wall time; wall_s its share), so a bundle stopped midway
  leaves the seeds it finished done; the checkpoint goes once every seed it holds is done.

Resume: a bundle starts from the furthest checkpoint in its folder that holds all its seeds as
these nodes (their fingerprints: a switch's or SFT's folder is named without its inputs), sliced
to them (a bundle rerun without the seeds an earlier attempt finished goes on from that
attempt's checkpoint). Not written for a bundled seed: a per-node checkpoints/last.ckpt (the
bundle's checkpoint holds it) and val/fact_recall.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from ssmax.files.atomic import atomic_torch_save, atomic_write_json, atomic_write_text
from ssmax.lit.bundle.checkpoint import sliced
from ssmax.lit.bundle.run import BundleHooks, BundleRun
from ssmax.lit.plan import TrainingPlan, data_state_path
from ssmax.lit.trainer import WEIGHTS_FILE, _drain, build_logger, tracks_system
from ssmax.pipeline.bundle.group import TRAIN, BundleJob
from ssmax.pipeline.job import NodeJob
from ssmax.pipeline.run import close_node, open_node, pin_process
from ssmax.pipeline.state import read_done
from ssmax.stages.context import StageContext
from ssmax.stages.outputs import Trained
from ssmax.stages.spec import stage_module, stage_spec
from ssmax.tracking.store import offline
from ssmax.tracking.sync import merge_nodes
from ssmax.tracking.system_metrics import SystemMetrics, store_log


def seed_start(ctx: StageContext, module: str) -> TrainingPlan:
    """The plan the node's stage module (its SPEC: bundle="train") gives
    ssmax.lit.trainer.train for this node (its train_start): a bundled seed trains its solo
    node's plan."""
    if stage_spec(module).bundle != TRAIN:
        raise ValueError(f"a bundle trains nodes of a stage whose SPEC says bundle={TRAIN!r}, "
                         f"not {module}'s")  # fmt: skip
    return stage_module(module).train_start(ctx)


def variant_stats(run: BundleRun, i: int) -> dict[str, float]:
    """LitLM.variant_stats of seed i: mean/min/max of its learned s and b per layer, of p_n."""
    stats: dict[str, float] = {}
    for name, param in run.bundle.params.items():
        parts = name.split(".")  # model.layers.<l>.attn.<s|b>, model.p_n
        if len(parts) == 5 and parts[1] == "layers" and parts[3] == "attn" and parts[4] in "sb":
            key = f"attn/{parts[4]}_{{}}/layer_{int(parts[2]):02d}"
        elif name == "model.p_n":
            key = "attn/p_n_{}"
        else:
            continue
        value = param[i].detach().float()
        for fn in ("mean", "min", "max"):
            stats[key.format(fn)] = getattr(value, fn)().item()
    return stats


class SeedWriter(BundleHooks):
    """What each seed's solo run writes while it trains, for every seed of a bundle: its MLflow
    metrics, its switch-point files; and the bundle's checkpoints."""

    def __init__(self, job: BundleJob, members: list[NodeJob], cfgs: list[DictConfig],
                 plans: list[TrainingPlan]) -> None:  # fmt: skip
        """cfgs, plans: each seed's config (read) and plan (ssmax.lit.plan)."""
        self.job, self.members, self.cfgs, self.plans = job, members, cfgs, plans
        self.dirs = [Path(m.dir) for m in members]
        cfg = cfgs[0]
        self.loggers: list[Any] = []  # open(): each seed's, as its solo run's
        self.monitor: SystemMetrics | None = None
        self.module = members[0].module
        self.every = int(cfg.trainer.log_every_n_steps)
        self.checkpoint_every = int(cfg.trainer.checkpoint_every_n_steps)
        self.tick: tuple[float, list[int]] | None = None  # time, each seed's tokens then
        self.path = Path(job.dir) / f"{digest([int(m.seed) for m in members])}.ckpt"  # type: ignore[arg-type]
        self.callbacks = bundle_callbacks(cfg)

    def open(self, seeds: list[int]) -> None:
        """Each seed's MLflow run (made, or reopened on resume), tagged with its bundle."""
        if self.cfgs[0].tracking.enabled:
            self.loggers = [build_logger(p.recorded(c), p.run_dir)
                            for c, p in zip(self.cfgs, self.plans, strict=True)]  # fmt: skip
        for logger in self.loggers:
            logger.experiment.set_tag(logger.run_id, "bundle", f"{len(seeds)} seeds: {seeds}")
        self.monitor = self._system_metrics(self.cfgs[0])

    def _system_metrics(self, cfg: DictConfig) -> SystemMetrics | None:
        """One sampler of this process for the bundle, each sample into every seed's run (the
        process that trained it, as a solo node's run holds its own)."""
        if not self.loggers or not tracks_system(cfg):
            return None
        logs = [lg.log_system_metrics if hasattr(lg, "log_system_metrics")
                else store_log(lg.experiment, lg.run_id) for lg in self.loggers]  # fmt: skip

        def log(metrics: dict[str, float], step: int) -> None:
            for one in logs:
                one(metrics, step)

        first = max(lg.next_step("system/") for lg in self.loggers)
        interval = cfg.tracking.get("system_metrics_interval_s", 10.0)
        return SystemMetrics(log, interval, None, first).start()

    def after_step(self, run: BundleRun, step: int, loss: torch.Tensor, lr: float) -> None:
        if step % self.every == 0:  # as LitLM.on_before_optimizer_step: the step's index
            self._log_step(run, step, loss, lr)
        if run.step in run.val:  # as Lightning logs a validation inside fit: its last step's
            self._log({"val/loss": run.val[run.step]}, run.step - 1)
        if run.step in run.saved:
            self._save_point(run.step, run.saved[run.step])
        if run.step % self.checkpoint_every == 0 or run.step == run.total:
            self.checkpoint(run)
        for callback in self.callbacks:  # a test's hold or kill, after the step's checkpoint
            callback.on_bundle_step(Path(self.job.dir), run.step)

    def _log_step(self, run: BundleRun, step: int, loss: torch.Tensor, lr: float) -> None:
        now, seen = time.perf_counter(), list(run.tokens)  # each seed's own (SFT's differ)
        for i, logger in enumerate(self.loggers):
            metrics = {"train/loss": loss[i].item(), "train/lr": lr,
                       "train/tokens_seen": float(seen[i])}  # fmt: skip
            if self.tick is not None:
                metrics["train/tokens_per_s"] = (seen[i] - self.tick[1][i]) / (now - self.tick[0])
            logger.log_metrics(metrics | variant_stats(run, i), step)
        self.tick = (now, seen)

    def _log(self, per_seed: dict[str, torch.Tensor], step: int) -> None:
        for i, logger in enumerate(self.loggers):
            logger.log_metrics({k: float(v[i]) for k, v in per_seed.items()}, step)

    def _save_point(self, step: int, saved: list[tuple[dict, dict]]) -> None:
        """Each seed's model_step<N>.pt and data_step<N>.json, as SaveWeightsAt writes them
        (one already there, from an attempt before a resume, stays)."""
        for directory, (weights, data) in zip(self.dirs, saved, strict=True):
            path = directory / f"model_step{step}.pt"
            if not path.exists():
                atomic_write_json(data_state_path(path), data)
                atomic_torch_save(weights, path)

    def checkpoint(self, run: BundleRun) -> None:
        """The whole bundle, atomically; with its nodes, so that it goes once they are done."""
        state = run.state_dict() | {"nodes": [[m.dir, m.fingerprint] for m in self.members]}
        atomic_torch_save(state, self.path)

    def resume(self, run: BundleRun) -> None:
        """Go on from the furthest checkpoint in the bundle's folder holding all its seeds."""
        best: tuple[int, Path] | None = None
        want = {int(m.seed): m.fingerprint for m in self.members}  # type: ignore[arg-type]
        for path in Path(self.job.dir).glob("*.ckpt"):
            state = _peek(path)
            # its seeds, as these nodes: a switch's or SFT's folder is named without its
            # inputs, and a checkpoint made from other inputs' weights is not these nodes'
            held = {} if state is None else dict(zip(state["seeds"], state["nodes"], strict=True))
            holds = all(s in held and held[s][1] == fp for s, fp in want.items())
            if holds and (best is None or int(state["step"]) > best[0]):
                best = (int(state["step"]), path)
        if best is None:
            return
        state = torch.load(best[1], map_location="cpu", weights_only=True)
        run.load_state_dict(sliced(state, run.seeds))
        print(f"bundle {self.job.name}: resumed at step {run.step} from {best[1]}",
              file=sys.stderr, flush=True)  # fmt: skip

    def end_training(self, run: BundleRun) -> None:
        """The final weights' validation, at the last step (a solo run's trainer.validate),
        and the system metrics' last sample."""
        self._log({"val/loss": run.val[run.total]}, run.total)
        self.stop()

    def finish_seed(self, i: int, run: BundleRun) -> Any:
        """Seed i's model.pt and its run's end; its outputs as its stage's (its
        seed_outputs(plan, done), from what a solo node's training gives: ssmax.stages.training)."""
        directory = self.dirs[i]
        atomic_torch_save(run.bundle.state_dict(i), directory / WEIGHTS_FILE)
        logger = self.loggers[i] if self.loggers else None
        if logger is not None:
            logger.finalize("success")
            _drain(logger)
        done = Trained(
            weights=str(directory / WEIGHTS_FILE),
            train_loss=run.last_batch[i].item() if run.last_batch is not None else None,
            val_loss=float(run.val[run.total][i]),
            run_id=logger.run_id if logger is not None else None,
        )
        return stage_module(self.module).seed_outputs(self.plans[i], done)

    def stop(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor = None

    def failed(self, err: BaseException) -> None:
        """A bundle that failed: each seed's run FAILED (KILLED where stopped); on an error (not
        an interrupt) its folder gone unless the bundle's checkpoint lets it resume (a solo
        node's rule: ssmax.pipeline.run.discard_unresumable)."""
        self.stop()
        for logger in self.loggers:
            logger.finalize("failed")
            _drain(logger)
        if not isinstance(err, Exception):
            return
        for cfg, directory in zip(self.cfgs, self.dirs, strict=True):
            if offline(cfg):  # its failed run, before its folder may go
                merge_nodes(cfg.paths.output_dir, directory)
            if not self.path.exists() and not (directory / "done.json").exists():
                shutil.rmtree(directory, ignore_errors=True)

    def remove_finished(self) -> None:
        """The checkpoints in the bundle's folder whose nodes are all done."""
        for path in Path(self.job.dir).glob("*.ckpt"):
            state = _peek(path)
            nodes = state.get("nodes", []) if state else []
            if nodes and all(read_done(Path(d), fp) for d, fp in nodes):
                path.unlink(missing_ok=True)


def bundle_callbacks(cfg: DictConfig) -> list[Any]:
    """trainer.callbacks that act in a bundle too (on_bundle_step(folder, steps taken): the
    holds and faults tests set); the others, Lightning's alone, named in one line each."""
    found = []
    for spec in cfg.trainer.callbacks:
        callback = hydra.utils.instantiate(spec)
        if hasattr(callback, "on_bundle_step"):
            found.append(callback)
        else:
            print(f"trainer.callbacks: {spec.get('_target_')} does not run in a bundle",
                  file=sys.stderr, flush=True)  # fmt: skip
    return found


def digest(seeds: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, seeds)).encode()).hexdigest()[:16]


def _peek(path: Path) -> dict[str, Any] | None:
    """A checkpoint's small entries (seeds, step, nodes) without reading its tensors."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # noqa: BLE001 - a checkpoint that does not load is not resumed
        print(f"bundle checkpoint {path} does not load ({err}); not resumed from",
              file=sys.stderr, flush=True)  # fmt: skip
        return None
    return {k: state.get(k) for k in ("seeds", "step", "nodes")}


def execute_bundle(job: BundleJob) -> dict[str, Any]:
    """Train the bundle's seeds not done yet as one, then write each one's node (module
    docstring); returns {"wall_s", "records": node -> its done record}."""
    start = time.perf_counter()
    members = [m for m in job.members if m.done is None]  # another run may have finished some
    if not members:
        return {"wall_s": 0.0, "records": {}}
    nodes = [OmegaConf.create(m.cfg_yaml) for m in members]
    pin_process(nodes[0], job.threads)
    cfgs, plans, tracked = [], [], []  # each seed's config as its stage reads it, its plan
    for member, node in zip(members, nodes, strict=True):
        ctx, node_run = open_node(member, node, rank0=True)  # its MLflow run: the logger's
        tracked.append(node_run)
        plan = seed_start(ctx, member.module)
        record = OmegaConf.to_yaml(plan.recorded(ctx.cfg), resolve=True)
        atomic_write_text(plan.run_dir / "config.yaml", record)
        cfgs.append(ctx.cfg)
        plans.append(plan)
    seeds = [int(m.seed) for m in members]  # type: ignore[arg-type]
    writer = SeedWriter(job, members, cfgs, plans)
    try:
        writer.open(seeds)
        run = BundleRun(cfgs[0], seeds, plans)  # each seed its own plan: weights, data position
        writer.resume(run)
        run.run(writer)
        if not writer.path.exists():  # resumed at the end from another's: this one's own
            writer.checkpoint(run)
        writer.end_training(run)
    except BaseException as err:
        writer.failed(err)
        raise
    wall = time.perf_counter() - start
    about = {"bundle": {"size": len(seeds), "seeds": seeds, "wall_s": round(wall, 3)}}
    records = {}
    for i, member in enumerate(members):  # seed by seed
        outputs = writer.finish_seed(i, run)
        records[member.name] = close_node(member, tracked[i], outputs, outputs.run_id,
                                          wall / len(seeds), extra=about)  # fmt: skip
    writer.remove_finished()
    return {"wall_s": round(time.perf_counter() - start, 3), "records": records}
