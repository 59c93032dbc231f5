"""Every attention length law, written once: the per-position term of the factor m_i that
multiplies the query (softmax(m_i q_i K^T / sqrt(d)), Sec. 2.3, Eq. 11), m_i = s * term + b.

Plain torch and no project imports: this project's model uses it (ssmax.model.attention), and
the export copies this file beside modeling_ssmax.py, which imports it as `.laws`, into every
exported folder (ssmax.export.folder). n is the number of keys a query sees (position + 1 under
the causal mask), N = train_len the training length:

    log_n        log n                                  (b)-(f): SSMax, Eq. 2 (+ b: Eq. 4)
    p_n          p_min(n, N)                            Sec. 2.1's rationale model, Eq. 3
    qwen_log_n   max(1, log n / log N)                  Qwen's log-n scaling
    llama4       1 + beta log(1 + floor(n / (floor_scale N)))   Llama 4's attention temperature
    sqrt_log_n   sqrt(log n)                            a slower-growing law

A law is a function (n, *, train_len, p_n, <PARAMS>) -> term, n and term float32; softmax
("none") has no term. A law's own parameter (like beta) is a field of the same name of the
variant config (ssmax.model.VariantConfig) and `ssmax_<name>` in an exported config.json: list
it in PARAMS.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

# the laws' parameters besides s, b, N and p_n: variant fields, config.json's ssmax_<name>
PARAMS = ("beta", "floor_scale")


def log_n(n: torch.Tensor, **_: object) -> torch.Tensor:
    return torch.log(n)


def p_n(n: torch.Tensor, *, p_n: torch.Tensor | None, **_: object) -> torch.Tensor:
    """p_n is defined for n = 1..N only; past the training length it is held at p_N (the
    rationale model is only read for Fig. 2, never evaluated at long context)."""
    if p_n is None:
        raise ValueError("law p_n needs the shared p_n table")
    return p_n.float()[(n.clamp(1, p_n.numel()) - 1).long()]


def qwen_log_n(n: torch.Tensor, *, train_len: int, **_: object) -> torch.Tensor:
    return (torch.log(n) / math.log(train_len)).clamp(min=1.0)


def llama4(
    n: torch.Tensor, *, train_len: int, beta: float, floor_scale: float, **_: object
) -> torch.Tensor:
    steps = torch.floor(n / (floor_scale * train_len))
    return 1.0 + beta * torch.log1p(steps)


def sqrt_log_n(n: torch.Tensor, **_: object) -> torch.Tensor:
    return torch.sqrt(torch.log(n))


LAWS: dict[str, Callable[..., torch.Tensor]] = {
    "log_n": log_n, "p_n": p_n, "qwen_log_n": qwen_log_n, "llama4": llama4,
    "sqrt_log_n": sqrt_log_n,
}  # fmt: skip


def length_term(
    law: str,
    n: torch.Tensor,
    *,
    train_len: int,
    p_n: torch.Tensor | None = None,
    **params: float,
) -> torch.Tensor | None:
    """The law's term for key counts n (any shape), float32; None for softmax ("none")."""
    if law == "none":
        return None
    if law not in LAWS:
        raise ValueError(f"law={law!r}; allowed: none, {', '.join(LAWS)}")
    return LAWS[law](n.float(), train_len=train_len, p_n=p_n, **params)
