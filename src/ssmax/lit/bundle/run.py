"""Training K seeds of one variant as one batched job (issue 59): train_bundle.

The plainest loop that does what a solo training run (ssmax.lit.trainer.train: Lightning
around LitLM) does for each seed, on a SeedBundle (ssmax.model.bundle), for the objectives
pretrain (from scratch, or from other weights and another run's data position: (f)'s switch)
and sft:

- plans: each seed's ssmax.lit.plan.TrainingPlan, the one its solo run trains (a stage's
  train_start, or config_plans as the command line would); their objective, length and save
  points one;
- init: each seed's model as its solo run builds it (torch seeded with the seed, then the
  model: ssmax.model.factory.build_model), then, where the seed starts from other weights (its
  plan's init_from: its own (a)'s switch point, its own pretrained model), those loaded as
  train() loads them (load_backbone: the variant's own scalars keep their init);
- data: each seed its own datamodule, sampler and planted facts (seeded by the seed, as
  lm_datamodule or sft_datamodule), so its own order, begun where its plan's data_start
  (another run's data_step<N>.json) says (ssmax.lit.bundle.data); epochs roll over as
  the sampler counts them;
  on CUDA each seed's batches made in a loader process of its own (the same batches). SFT's
  batches are trimmed to their longest example, so the seeds' widths differ: each is padded
  back to the widest (EOS, labels ignored: attention is causal, no loss term changes);
- loss: LitLM.loss, micro-batches divided by the accumulation, as Lightning does; the last
  step of a pass over the data takes the micro-batches left, as Lightning steps at an epoch's
  last batch;
- clipping: each seed's gradient by its own norm (SeedBundle.clip_per_seed), never one norm
  over the seeds;
- optimizer: one AdamW over the stacked parameters, LitLM's groups, lr, betas, eps and
  weight decay, fused on CUDA as LitLM; AdamW is elementwise, so after the per-seed clip each
  seed's slice takes its solo step (tests/test_bundle.py checks it bit for bit);
- schedule: LitLM's lr_factor (warmup, then constant or cosine), stepped after each step;
  the plan's length in steps (SFT's epochs counted as train() counts them: Epochs.count);
- precision: trainer.precision as Lightning applies it: 32-true; 64-true (weights cast to
  float64 after their float32 init, float64 the default dtype in the forward); bf16-mixed
  (autocast, float32 weights). Not compiled (a solo run on CUDA compiles its loss).

- validation: every trainer.val_every_n_steps steps (counted in micro-batches, as Lightning's
  val_check_interval), each seed's loss on the first trainer.val_batches batches of the
  validation loader (the same rows for every seed: no planted facts of its own there), their
  mean weighted by batch size, as Lightning averages LitLM's val/loss; and the final weights
  where the last step had none (trainer.validate).

- weights mid-run: after each step of the plan's save_at, each seed's weights and where
  its data stood (batches taken, its datamodule's state), as SaveWeightsAt writes
  model_step<N>.pt and data_step<N>.json for (f) to continue from.

BundleRun holds that state step by step: its state_dict is a checkpoint of every seed at once
(stacked weights, AdamW's moments, the schedule, the steps taken), which
ssmax.lit.bundle.checkpoint.sliced cuts down to some of the seeds, and load_state_dict goes on
from one. What it leaves to its caller
(BundleHooks): writing checkpoints, MLflow and the node folders (the pipeline's wiring:
ssmax.pipeline.bundle.group; docs/training.md, "Seeds bundled").
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from ssmax.data.lm_module import LMDataModule, lm_datamodule
from ssmax.data.sft_module import sft_datamodule
from ssmax.lit.bundle.data import passes, seed_datamodules, sft_datamodules, stacked, with_workers
from ssmax.lit.bundle.precision import forward_context, precision_of
from ssmax.lit.lightning_module import lr_factor
from ssmax.lit.plan import TrainingPlan
from ssmax.model.bundle import SeedBundle, param_groups
from ssmax.model.factory import build_model
from ssmax.preflight.weights import load_init

OBJECTIVES = ("pretrain", "sft")


class TrainingDiverged(RuntimeError):
    """A seed's training loss is not finite; the message names the seed and the step."""


@dataclass
class BundleResult:
    seeds: list[int]
    states: list[dict[str, torch.Tensor]]  # each seed's final weights (Transformer keys)
    losses: torch.Tensor  # [steps, K] each seed's training loss, mean over its micro-batches
    grad_norms: torch.Tensor  # [steps, K] each seed's gradient norm before clipping
    val_losses: dict[int, torch.Tensor]  # step -> [K] each seed's validation loss there
    # step -> per seed (its weights then, where its data stood: data_step<N>.json's content)
    saved: dict[int, list[tuple[dict[str, torch.Tensor], dict]]]
    last_batch: torch.Tensor | None = None  # [K] the last micro-batch's loss (a solo train/loss)


def seed_model(cfg: DictConfig, seed: int, init_from: str | None) -> torch.nn.Module:
    """Seed's model as its solo run has it before its first step: initialised by its seed,
    then, given its plan's init_from, those weights loaded as train() loads them (load_init)."""
    model = build_model(cfg, seed)
    if init_from:
        load_init(model, cfg, init_from)
    return model


def config_plans(
    cfg: DictConfig,
    seeds: Sequence[int],
    init_from: Sequence[str | Path | None] | None = None,
    data_start: Sequence[str | Path | None] | None = None,
) -> list[TrainingPlan]:
    """Each seed's plan as the command line gives its solo run (TrainingPlan.from_config), from
    its own init_from and data_start (per seed; None: cfg.init_from for every seed, its data
    from the start)."""
    data = sft_datamodule if cfg.objective == "sft" else lm_datamodule
    inits = [cfg.init_from] * len(seeds) if init_from is None else list(init_from)
    starts = [None] * len(seeds) if data_start is None else list(data_start)
    if len(inits) != len(seeds) or len(starts) != len(seeds):
        raise ValueError(f"{len(inits)} init_from and {len(starts)} data_start for "
                         f"{len(seeds)} seeds")  # fmt: skip
    plan = TrainingPlan.from_config(cfg, data)
    return [replace(plan, init_from=None if i is None else str(i),
                    data_start=None if d is None else str(d))
            for i, d in zip(inits, starts, strict=True)]  # fmt: skip


class BundleHooks:
    """What a caller does as a bundle trains (the pipeline: MLflow, switch-point files,
    checkpoints; ssmax.pipeline.bundle.group). Each method is a no-op here."""

    def after_step(self, run: BundleRun, step: int, loss: torch.Tensor, lr: float) -> None:
        """After optimizer step `step` (0-based) and what follows it (its save point, its
        validation): loss [K] the step's, lr the one it used."""


class BundleRun:
    """train_bundle's state, stepwise: the bundle, its AdamW and LR schedule, each seed's
    datamodule, the steps taken and what they gave. state_dict / load_state_dict: a checkpoint
    of all of it (resume: ssmax.pipeline.bundle.group), each seed's slice one solo run's state."""

    def __init__(
        self,
        cfg: DictConfig,
        seeds: Sequence[int],
        plans: Sequence[TrainingPlan],
        *,
        device: str | torch.device | None = None,
        vmap: bool = True,
        loader_workers: int | None = None,
    ) -> None:
        """plans: each seed's, the one its solo run trains (a stage's train_start, or
        config_plans): the weights it starts from, where its data begins; their objective,
        length and save points one (a bundle steps its seeds together)."""
        plan = plans[0]
        if plan.objective not in OBJECTIVES:
            raise ValueError(f"objective={plan.objective} in a bundle; allowed: {OBJECTIVES}")
        if len(plans) != len(seeds):
            raise ValueError(f"{len(plans)} plans for {len(seeds)} seeds")
        if len({(p.objective, p.length, p.save_at) for p in plans}) != 1:
            raise ValueError("a bundle's seeds train one objective, length and save points")
        inits = [p.init_from for p in plans]
        if cfg.variant.s_init == "inv_mean_log_n" and not all(inits):
            raise ValueError(f"variant={cfg.variant.name} starts from softmax weights: give "
                             "each seed's init_from")  # fmt: skip
        if cfg.trainer.devices * cfg.trainer.num_nodes != 1:
            raise ValueError("a bundle trains on one device (trainer.devices=1, num_nodes=1)")
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds {list(seeds)} repeat one")
        self.cfg, self.seeds, self.plan = cfg, list(seeds), plan
        stage = self.stage = cfg.trainer[plan.objective]
        self.accumulate = stage.global_batch // stage.batch_size
        if device is None:
            cuda = cfg.trainer.accelerator != "cpu" and torch.cuda.is_available()
            device = "cuda" if cuda else "cpu"
        self.dev = torch.device(device)
        self.mode = precision_of(cfg.trainer.precision, self.dev)
        # a seed's batch is ~7.5 ms of Python (its facts planted; tiny, 2-core EPYC): K seeds in
        # this process would outrun a GPU's step, so there each seed has a loader process
        cuda = self.dev.type == "cuda"
        self.loader_workers = (1 if cuda else 0) if loader_workers is None else loader_workers
        models = [seed_model(cfg, s, path) for s, path in zip(seeds, inits, strict=True)]
        self.bundle = SeedBundle(models, seeds, plan.objective, cfg.trainer.loss_chunk, vmap)
        self.bundle.to(self.dev, torch.float64 if self.mode == "64-true" else None)
        self.optimizer = torch.optim.AdamW(
            param_groups(self.bundle, stage.weight_decay),
            lr=stage.lr,
            betas=tuple(stage.betas),
            eps=stage.eps,
            fused=self.dev.type == "cuda",
        )
        datamodules = sft_datamodules if plan.objective == "sft" else seed_datamodules
        self.modules = datamodules(cfg, seeds, stage.batch_size)  # each as plan.data's, shared rows
        for module, one in zip(self.modules, plans, strict=True):
            if one.data_start is not None:  # (f): its own (a)'s data where that stood at the switch
                module.start_from(json.loads(Path(one.data_start).read_text()))
        self.pad_id = self.modules[0].tokenizer.eos_id
        batches_per_epoch = lambda: len(self.modules[0].train_dataloader())  # noqa: E731
        self.total, warmup = plan.length.count(batches_per_epoch, self.accumulate)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda step: lr_factor(step, warmup, self.total, stage.schedule, stage.min_lr_ratio),
        )
        self.step = 0  # optimizer steps taken
        self.batches = 0  # micro-batches taken (of this run: its data_start's come before)
        self.tokens = [0] * len(self.seeds)  # each seed's tokens trained on (unpadded)
        self.losses: list[torch.Tensor] = []  # per step [K]
        self.norms: list[torch.Tensor] = []  # per step [K], before clipping
        self.last_batch: torch.Tensor | None = None  # [K] the last micro-batch's loss
        self.val: dict[int, torch.Tensor] = {}  # steps taken -> [K]
        self.saved: dict[int, list[tuple[dict[str, torch.Tensor], dict]]] = {}

    def data_state(self, i: int) -> dict:
        """Where seed i's data stands (SaveWeightsAt's data_step<N>.json content)."""
        module = self.modules[i]
        return {"batches_done": module.start_batches + self.batches} | module.state_dict()

    def run(self, hooks: BundleHooks | None = None) -> BundleResult:
        """Train from self.step to the plan's steps, then validate the final weights
        where no validation fell on the last step (a solo run's trainer.validate)."""
        hooks = hooks or BundleHooks()
        for module in self.modules:  # a resumed run: each seed's sampler where it stood
            module.resume_at(self.batches)
        streams = [passes(m, self.loader_workers) for m in self.modules]
        # Lightning's val_check_interval, in micro-batches (trainer.val_every_n_steps steps);
        # where an epoch's last step is short, Lightning may validate amid an accumulation,
        # before its step: here after it (val/loss only; training is the same)
        every = int(self.cfg.trainer.val_every_n_steps) * self.accumulate
        save_at = set(self.plan.save_at)
        while self.step < self.total:
            step, before = self.step, self.batches
            lr = self.optimizer.param_groups[0]["lr"]  # the LR this step uses
            loss = self._step(streams)
            self.step += 1
            if self.step in save_at:  # as SaveWeightsAt: batches taken, the datamodule's state
                self.saved[self.step] = [(self.bundle.state_dict(i), self.data_state(i))
                                         for i in range(len(self.bundle))]  # fmt: skip
            if self.batches // every > before // every:
                self.val[self.step] = self.validate()
            hooks.after_step(self, step, loss, lr)
        if self.total not in self.val:
            self.val[self.total] = self.validate()
        return self.result()

    def _step(self, streams: list[Iterator[tuple[dict[str, torch.Tensor], bool]]]) -> torch.Tensor:
        """One optimizer step of every seed; its loss [K] (the mean over its micro-batches):
        trainer.<objective>'s accumulation, or the micro-batches left in a pass over the data
        (Lightning steps at an epoch's last batch; the loss still divided by the accumulation,
        as Lightning divides it)."""
        dev, bundle = self.dev, self.bundle
        self.optimizer.zero_grad(set_to_none=True)
        micro: list[torch.Tensor] = []
        last = False
        while len(micro) < self.accumulate and not last:
            got = [next(s) for s in streams]
            last = got[0][1]
            # a short step for some seeds only would split the bundle's steps; seeds of one
            # stage start at one position (their inputs took the same steps), so never here
            if self.accumulate > 1 and any(end != last for _, end in got):
                raise RuntimeError(f"seeds {self.seeds}: their passes over the data end apart, "
                                   "and a step accumulates batches")  # fmt: skip
            seed_batches = [batch for batch, _ in got]
            ids, labels = (t.to(dev, non_blocking=True) for t in stacked(seed_batches, self.pad_id))
            with forward_context(self.mode, dev):
                loss = bundle.loss(ids, labels)  # [K]
            (loss.sum() / self.accumulate).backward()
            micro.append(loss.detach())  # float64 under 64-true, else float32
            self.batches += 1
            for i, batch in enumerate(seed_batches):
                self.tokens[i] += batch["input_ids"].numel()
        step_loss = torch.stack(micro).mean(0)
        _check_finite(step_loss, bundle.seeds, self.step)
        self.norms.append(bundle.clip_per_seed(self.stage.grad_clip).detach())
        self.optimizer.step()
        self.schedule.step()
        self.losses.append(step_loss)
        self.last_batch = micro[-1]
        return step_loss

    def validate(self) -> torch.Tensor:
        """Each seed's validation loss [K] now."""
        limit = self.cfg.trainer.val_batches
        return val_losses(self.bundle, self.modules[0], limit, self.mode, self.dev)

    def result(self) -> BundleResult:
        k = len(self.bundle)
        return BundleResult(
            seeds=list(self.seeds),
            states=[self.bundle.state_dict(i) for i in range(k)],
            losses=torch.stack(self.losses).cpu() if self.losses else torch.empty(0, k),
            grad_norms=torch.stack(self.norms).cpu() if self.norms else torch.empty(0, k),
            val_losses=self.val,
            saved=self.saved,
            last_batch=self.last_batch.cpu() if self.last_batch is not None else None,
        )

    def state_dict(self) -> dict[str, Any]:
        """Everything the run goes on from: the stacked weights, AdamW's moments, the LR
        schedule, the steps taken, what they gave, where each seed's data stands."""
        empty = torch.empty(0, len(self.seeds))
        return {
            "seeds": list(self.seeds),
            "step": self.step,
            "batches": self.batches,
            "tokens": list(self.tokens),
            "params": {n: p.detach().clone() for n, p in self.bundle.params.items()},
            # copies: the optimizer's own tensors move on with the next step
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "schedule": self.schedule.state_dict(),
            "losses": torch.stack(self.losses).cpu() if self.losses else empty,
            "grad_norms": torch.stack(self.norms).cpu() if self.norms else empty,
            "last_batch": self.last_batch,
            "val": dict(self.val),
            "data": [self.data_state(i) for i in range(len(self.seeds))],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from a checkpoint of these seeds (sliced() picks them from a larger one)."""
        if list(state["seeds"]) != self.seeds:
            raise ValueError(f"a checkpoint of seeds {state['seeds']} for a bundle of {self.seeds}")
        with torch.no_grad():
            for name, param in self.bundle.params.items():
                param.copy_(state["params"][name])
        # a copy: AdamW keeps tensors of the device and dtype it needs as given, and steps them
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self.schedule.load_state_dict(state["schedule"])
        self.step = int(state["step"])
        self.batches = int(state.get("batches", self.step * self.accumulate))  # older: none
        self.tokens = list(state.get("tokens") or [0] * len(self.seeds))
        self.losses = list(state["losses"].to(self.dev).unbind(0))
        self.norms = list(state["grad_norms"].to(self.dev).unbind(0))
        self.last_batch = state["last_batch"]
        self.val = dict(state["val"])


def train_bundle(
    cfg: DictConfig,
    seeds: Sequence[int],
    *,
    init_from: Sequence[str | Path | None] | None = None,
    data_start: Sequence[str | Path | None] | None = None,
    device: str | torch.device | None = None,
    vmap: bool = True,
    on_step: Callable[[int, torch.Tensor], None] | None = None,
) -> BundleResult:
    """Train cfg's variant for cfg.objective once per seed, all seeds as one bundle; each seed
    as its solo run of the command line (module docstring), from its init_from and data_start
    (config_plans). device: None for trainer.accelerator's (CUDA when present under auto).
    on_step(step, losses [K]) after each optimizer step (a progress line, a benchmark's clock)."""

    class Calls(BundleHooks):
        def after_step(self, run: BundleRun, step: int, loss: torch.Tensor, lr: float) -> None:
            if on_step is not None:
                on_step(step, loss)

    plans = config_plans(cfg, seeds, init_from, data_start)
    return BundleRun(cfg, seeds, plans, device=device, vmap=vmap).run(Calls())


@torch.no_grad()
def val_losses(
    bundle: SeedBundle, module: LMDataModule, limit: int | float, mode: str, dev: torch.device
) -> torch.Tensor:
    """Each seed's validation loss [K]: the batch losses over the first `limit` batches (a
    float: that share of them, as Lightning's limit_val_batches), weighted by batch size."""
    loader = with_workers(module.val_dataloader(), 0)  # a few batches: in this process
    count = limit if isinstance(limit, int) else int(len(loader) * limit)
    total, rows = torch.zeros(len(bundle), dtype=torch.float64, device=dev), 0
    for i, batch in enumerate(loader):
        if i >= count:
            break
        ids = batch["input_ids"].to(dev).expand(len(bundle), *batch["input_ids"].shape)
        labels = batch["labels"].to(dev).expand(len(bundle), *batch["labels"].shape)
        with forward_context(mode, dev):
            loss = bundle.loss(ids, labels)
        total += loss.double() * ids.shape[1]
        rows += ids.shape[1]
    return (total / max(rows, 1)).cpu()


def _check_finite(loss: torch.Tensor, seeds: list[int], step: int) -> None:
    """As ssmax.lit.guards.check_finite for a solo run: a loss that is not finite stops the
    bundle before the step touches the weights, naming the seeds."""
    finite = torch.isfinite(loss)
    if not bool(finite.all()):
        bad = [s for s, ok in zip(seeds, finite.tolist(), strict=True) if not ok]
        raise TrainingDiverged(f"training loss not finite at step {step + 1} for seeds {bad}")
