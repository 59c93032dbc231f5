"""What one node of a stage costs, as its stage module declares it: beside its SPEC, each stage
module has ``cost(cfg, stage, inputs) -> StageCost`` (the node's config, its stage in the
pipeline declaration, its input nodes' names). The plan (ssmax.pipeline.plan_cost) asks each node's
stage and turns the answer into GPU-hours, wall time and disk; a module without ``cost`` is
shown as declaring none, never counted as free. A stage that computes nothing says so with
``StageCost()``.

FLOPs per token, PaLM's convention (Chowdhery et al. 2022, App. B; the one bench_step.py
measures MFU against), N = all parameters, L layers, d width, T the context: training
6N + 12 L d T (attention scores and values; the causal half is not subtracted), a forward pass
2N + 4 L d T at its own context.

Bookkeeping, like the pipeline: it shapes no result (ssmax.pipeline.stage_code.NO_RESULT), and loads
the model code only when asked (importing it costs a stage nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch.overrides import TorchFunctionMode

from ssmax.model import count_parameters
from ssmax.model.factory import model_config, variant_config

if TYPE_CHECKING:
    from omegaconf import DictConfig

BYTES_TRAINING = 4 + 8  # per parameter in last.ckpt: fp32 weights and AdamW's two moments
BYTES_WEIGHTS = 4  # per parameter in model.pt / model_step<N>.pt


@dataclass(frozen=True)
class StageCost:
    """tokens: what the node's passes process; flops: their FLOPs; disk: bytes it writes
    (checkpoints, weights); rate: the measured rate its GPU time follows (ssmax.pipeline.
    measured kinds: train, eval_loss, niah), None where it computes nothing; corpus_tokens: the
    pretraining corpus tokens it reads (what data.shards_dir must hold)."""

    tokens: float = 0.0
    flops: float = 0.0
    disk: float = 0.0
    rate: str | None = None
    corpus_tokens: float = 0.0


def per_token(cfg: DictConfig, context: int, training: bool) -> tuple[float, int]:
    """(FLOPs per token, N) of the node's model at a context of ``context`` tokens."""
    with _SkipInit():
        n = count_parameters(model_config(cfg), variant_config(cfg), cfg.data.seq_len)
    m = cfg.model
    attention = 4 * m.n_layers * m.dim * context
    return (6 * n + 3 * attention if training else 2 * n + attention), n


def parameters(cfg: DictConfig) -> int:
    """N: all parameters of the node's model."""
    return per_token(cfg, cfg.data.seq_len, training=True)[1]


def training(cfg: DictConfig, tokens: float, disk: float, corpus: bool = False) -> StageCost:
    """A training node: ``tokens`` optimizer-step tokens at the training length (validation
    passes, under 0.1% at paper scale, are left out); corpus: they come from the pretraining
    corpus."""
    flops = tokens * per_token(cfg, cfg.data.seq_len, training=True)[0]
    return StageCost(tokens, flops, disk, "train", tokens if corpus else 0.0)


def forward(cfg: DictConfig, passes: list[tuple[int, int]], rate: str) -> StageCost:
    """An eval node: (context, number of forward passes over it) of each kind of pass."""
    tokens = flops = 0.0
    for context, count in passes:
        tokens += count * context
        flops += count * context * per_token(cfg, context, training=False)[0]
    return StageCost(tokens, flops, 0.0, rate)


class _SkipInit(TorchFunctionMode):
    """torch.nn.init's functions do nothing: the model is built on the meta device only to count
    its parameters, and initialising meta weights (nn.Linear's, nn.Embedding's) imports
    torch._dynamo, ~1.2 s of CPU in a process that never compiles (`plan`, the pipeline's
    parent process)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs["tensor"]
        return func(*args, **(kwargs or {}))
