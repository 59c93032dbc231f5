"""The LightningModule: pretraining and SFT objectives around the Transformer."""

from __future__ import annotations

import math
import time
from typing import Any

import lightning as L
import torch

from ssmax.host.compiling import maybe_compile
from ssmax.lit.guards import check_finite
from ssmax.model import Transformer
from ssmax.model.loss import DEFAULT_CHUNK, model_loss, objective_loss, summed_loss


def fact_recall(right: torch.Tensor, answer: torch.Tensor) -> tuple[int, int]:
    """(values predicted whole, values asked): answer [B, T] numbers the label positions of
    each asked value 1, 2, ... (0 elsewhere); right [B, T] is True where the argmax is the label
    (at least at the asked positions). A value counts when every one of its tokens is right,
    i.e. greedy decoding after the question would write it out."""
    hits = asked = 0
    for q in range(1, int(answer.max()) + 1 if answer.numel() else 1):
        mask = answer == q
        has = mask.any(1)
        asked += int(has.sum())
        hits += int(((right | ~mask).all(1) & has).sum())
    return hits, asked


def lr_factor(step: int, warmup: int, total: int, schedule: str, min_ratio: float) -> float:
    """Linear warmup to 1, then constant (App. B) or cosine to min_ratio (App. C)."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay only on parameters of rank >= 2 (App. B): matrices and embeddings decay;
    norms and the variant scalars s, b, p_n do not."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]


class LitLM(L.LightningModule):
    """``model``: the run's Transformer (ssmax.model.factory.build_model); ``optim`` is one of
    the trainer.pretrain / trainer.sft blocks; ``total_steps`` and
    ``warmup_steps`` are optimizer steps, resolved by the caller (SFT counts in epochs).
    ``compile``: the training loss (model, LM head and cross-entropy together) runs under
    torch.compile; ``loss_chunk``: positions per LM-head + cross-entropy chunk."""

    # AdamW in one kernel for all parameters: None means on CUDA only (a test sets True)
    FUSED_ADAMW: bool | None = None

    def __init__(
        self,
        model: Transformer,
        objective: str,
        optim: dict[str, Any],
        total_steps: int,
        warmup_steps: int,
        compile: bool = False,
        loss_chunk: int = DEFAULT_CHUNK,
    ) -> None:
        super().__init__()
        self.model = model
        self.objective, self.optim, self.loss_chunk = objective, optim, loss_chunk
        self.train_loss = maybe_compile(self.loss, compile)
        self.total_steps, self.warmup_steps = total_steps, warmup_steps
        self.tokens_seen = 0
        self.resumed_metrics: dict[str, float] = {}  # the checkpoint's last step's, on resume
        self.batches_seen = 0  # micro-batches, to put the data order back on resume
        self._tick: tuple[float, int] | None = None  # (time, tokens_seen) at the last log
        self._losses: list[torch.Tensor] = []  # micro-batch losses of the current step

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids)

    def loss(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The objective's loss on one batch, from the hidden states chunk by chunk."""
        return model_loss(self.model, input_ids, labels, self.objective, self.loss_chunk)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.train_loss(batch["input_ids"], batch["labels"])
        self.tokens_seen += batch["input_ids"].numel()
        self.batches_seen += 1
        self._losses.append(loss.detach())
        self.log("train/loss", loss, prog_bar=True, logger=False)  # bar and callback_metrics
        return loss

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Step metrics go to the logger here, before this step's checkpoint can be written,
        so a run killed right after a checkpoint has already logged every step it covers."""
        losses, self._losses = self._losses, []
        check_finite(losses, self.trainer)  # a NaN stops the run before it touches the weights
        step, every = self.global_step, self.trainer.log_every_n_steps
        if step % every or not self.loggers:
            return
        now = time.perf_counter()
        metrics = {
            "train/loss": torch.stack(losses).mean().item(),
            "train/lr": optimizer.param_groups[0]["lr"],  # the LR this step uses
            "train/tokens_seen": float(self.tokens_seen),
        }
        if self._tick is not None:
            tick_time, tick_tokens = self._tick
            metrics["train/tokens_per_s"] = (self.tokens_seen - tick_tokens) / (now - tick_time)
        self._tick = (now, self.tokens_seen)
        for logger in self.loggers:
            logger.log_metrics(metrics | self.variant_stats(), step)

    def variant_stats(self) -> dict[str, float]:
        """mean/min/max of the learned s and b per layer, and of p_n."""
        stats: dict[str, float] = {}
        for i, block in enumerate(self.model.layers):
            for name in ("s", "b"):
                value = getattr(block.attn, name, None)
                if isinstance(value, torch.nn.Parameter):
                    v = value.detach().float()
                    for fn in ("mean", "min", "max"):
                        stats[f"attn/{name}_{fn}/layer_{i:02d}"] = getattr(v, fn)().item()
        p_n = getattr(self.model, "p_n", None)
        if p_n is not None:
            for fn in ("mean", "min", "max"):
                stats[f"attn/p_n_{fn}"] = getattr(p_n.detach().float(), fn)().item()
        return stats

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        labels, head = batch["labels"], self.model.lm_head.weight
        hidden = self.model.hidden(batch["input_ids"])  # eager: validation is a small share
        loss = objective_loss(summed_loss(hidden, head, labels, self.loss_chunk), labels,
                              self.objective)  # fmt: skip
        self.log("val/loss", loss, prog_bar=True, batch_size=labels.shape[0])
        if "answer" in batch:  # planted facts (data.facts): is each asked value read back?
            asked_at = batch["answer"] > 0  # the head at the answers' positions only
            right = torch.ones_like(labels, dtype=torch.bool)
            right[asked_at] = self.model.lm_head(hidden[asked_at]).argmax(-1) == labels[asked_at]
            hits, asked = fact_recall(right, batch["answer"])
            if asked:
                self.log("val/fact_recall", hits / asked, prog_bar=True, batch_size=asked)

    def configure_optimizers(self) -> dict[str, Any]:
        o = self.optim
        optimizer = torch.optim.AdamW(
            param_groups(self.model, o["weight_decay"]),
            lr=o["lr"],
            betas=tuple(o["betas"]),
            eps=o["eps"],
            fused=self.device.type == "cuda" if self.FUSED_ADAMW is None else self.FUSED_ADAMW,
        )
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda step: lr_factor(
                step, self.warmup_steps, self.total_steps, o["schedule"], o["min_lr_ratio"]
            ),
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clips the global norm itself: Lightning's mixed-precision plugin refuses any clipping
        for a fused AdamW, which unscales fp16 gradients inside its step. With no gradient
        scaler (bf16-mixed, 32-bit) the gradients are already the true ones; with one (16-mixed)
        Lightning's own path and its error stand."""
        if getattr(self.trainer.precision_plugin, "scaler", None) is not None:
            super().configure_gradient_clipping(
                optimizer, gradient_clip_val, gradient_clip_algorithm
            )
        elif gradient_clip_val:
            torch.nn.utils.clip_grad_norm_(self.parameters(), gradient_clip_val)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["tokens_seen"] = self.tokens_seen
        checkpoint["batches_seen"] = self.batches_seen
        # the step's loss: a run resumed at its final step takes no step and would lack it
        loss = self.trainer.callback_metrics.get("train/loss")
        checkpoint["train_metrics"] = {} if loss is None else {"train/loss": float(loss)}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Runs before the dataloaders are built: the datamodule skips what was trained on."""
        self.tokens_seen = checkpoint.get("tokens_seen", 0)
        self.batches_seen = checkpoint.get("batches_seen", 0)
        self.resumed_metrics = checkpoint.get("train_metrics", {})
        datamodule = getattr(self._trainer, "datamodule", None)
        if hasattr(datamodule, "resume_at"):
            datamodule.resume_at(self.batches_seen)
