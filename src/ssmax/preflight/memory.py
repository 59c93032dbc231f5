"""Eval contexts no memory here can hold, refused by `plan` in one line (ConfigError) instead of
a node that dies hours in for want of memory.

What an eval at a context of T tokens holds at the least, whatever its kernel or batch size:
NIAH decodes with a KV cache, the keys and values of every layer (2 x layers x dim values a
token); a forward pass over the context (the Fig. 5 loss, the needle scores) holds at least
one layer's (2 x dim a token); each value in bf16, 2 bytes. Attention scores, activations and
the weights come on top, so this bound is low on purpose: a context past it fails for sure.

It is compared with the largest memory the plan can see: this machine's RAM, each visible
GPU's memory, and under executor=slurm the cluster profile's memory a node (its mem_gb and its
stages'). Bookkeeping: it shapes no result (ssmax.pipeline.stage_code.NO_RESULT).
"""

from __future__ import annotations

import os

from omegaconf import DictConfig

from ssmax.config.compose import ConfigError

BYTES_A_VALUE = 2  # bf16: the least an eval keeps a key or value in
GIB = 2**30


def _size(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", GIB), ("MiB", 2**20)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} bytes"


def machine_memory(cfg: DictConfig) -> tuple[float, str]:
    """(bytes, what they are) of the largest memory an eval node could have."""
    import torch

    found: list[tuple[float, str]] = []
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        found.append((float(ram), f"{_size(ram)} of RAM here"))
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows): RAM unknown
        pass
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        props = torch.cuda.get_device_properties(i)
        found.append((float(props.total_memory), f"{_size(props.total_memory)} on GPU {i}"))
    if cfg.executor.kind == "slurm":
        ex = cfg.executor
        mem = [float(ex.mem_gb)] + [float(s.get("mem_gb") or 0) for s in ex.stages.values()]
        found.append((max(mem) * GIB, f"{max(mem):g} GiB a node in executor.stages/mem_gb"))
    if not found:
        return float("inf"), "unknown"
    return max(found)[0], ", ".join(text for _, text in found)


def eval_contexts(cfg: DictConfig) -> list[tuple[str, float, int]]:
    """(setting, multiple of data.seq_len, values a token it holds at the least) of every eval
    context the config asks for."""
    layers, dim, e = int(cfg.model.n_layers), int(cfg.model.dim), cfg.eval
    out: list[tuple[str, float, int]] = []
    for i, m in enumerate(e.niah.context_multiples):
        out.append((f"eval.niah.context_multiples[{i}]={m}", float(m), 2 * layers * dim))
    out.append((f"eval.loss.max_multiple={e.loss.max_multiple}", float(e.loss.max_multiple),
                2 * dim))  # fmt: skip
    for i, m in enumerate(e.loss.report_multiples):
        out.append((f"eval.loss.report_multiples[{i}]={m}", float(m), 2 * dim))
    if e.needle_scores is not None:
        m = e.needle_scores.context_multiple
        out.append((f"eval.needle_scores.context_multiple={m}", float(m), 2 * dim))
    return out


def check_eval_memory(cfg: DictConfig) -> None:
    """Every eval context fits the largest memory here (machine_memory), by the bound above."""
    have, what = machine_memory(cfg)
    seq_len = int(cfg.data.seq_len)
    for setting, multiple, values in eval_contexts(cfg):
        tokens = multiple * seq_len
        need = tokens * values * BYTES_A_VALUE
        if need <= have:
            continue
        kind = "keys and values of every layer" if values > 2 * cfg.model.dim else (
            "keys and values of one layer")  # fmt: skip
        most = have / (values * BYTES_A_VALUE * seq_len)
        raise ConfigError(
            f"{setting} asks for a context of {tokens:,.0f} tokens (x data.seq_len={seq_len}), "
            f"which needs at least {_size(need)} for the {kind} ({values:,} values of "
            f"{BYTES_A_VALUE} bytes a token), more than the largest memory the plan sees "
            f"({what}); allowed: a multiple up to {most:,.0f}"
        )
