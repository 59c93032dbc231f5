"""Small helpers shared by the evals."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from ssmax.config.schema import SDPA_FIRST
from ssmax.model import Transformer

T = TypeVar("T")

# SDPA backends in torch's default order (flash, efficient, math, then cuDNN)
SDPA_BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}


def scaled_theta(theta: float, factor: float) -> float:
    """RoPE theta x factor: the one place theta is scaled (Sec. 3.2, 3.3: 10,000 x 50 = 500,000
    for every eval, no retraining; the factor is protocol.rope_factor)."""
    return float(theta) * float(factor)


@contextmanager
def scaled_rope_theta(model: Transformer, factor: float) -> Iterator[None]:
    """Run the body with the model's RoPE theta x factor (scaled_theta); restored afterwards."""
    old = model.rope_theta
    model.rope_theta = scaled_theta(old, factor)  # angles are rebuilt from this on every call
    try:
        yield
    finally:
        model.rope_theta = old


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def cache_dtype(model: torch.nn.Module) -> torch.dtype:
    """The KV cache's dtype under device_autocast: bf16 on CUDA, else the weights' dtype."""
    param = next(model.parameters())
    return torch.bfloat16 if param.device.type == "cuda" else param.dtype


@contextmanager
def device_autocast(model: torch.nn.Module) -> Iterator[None]:
    """bf16 autocast while the model sits on a CUDA device (as it trained: App. B, C); on the
    CPU nothing changes (fp32, or whatever dtype the model has)."""
    if model_device(model).type != "cuda":
        yield
        return
    with torch.autocast("cuda", dtype=torch.bfloat16):
        yield


@contextmanager
def sdpa_first(first: str) -> Iterator[None]:
    """F.scaled_dot_product_attention tries backend ``first`` first, then the others in
    torch's default order; "torch": torch's order as it is. Every backend computes the same
    attention up to rounding; which is fastest depends on the GPU and the shapes
    (bench/bench_niah.py); one that cannot serve a call (cuDNN on a CPU) is passed over."""
    if first == "torch":
        yield
        return
    if first not in SDPA_BACKENDS:
        raise ValueError(f"eval.sdpa_first={first!r}: expected one of {', '.join(SDPA_FIRST)}")
    order = [SDPA_BACKENDS[first], *(b for n, b in SDPA_BACKENDS.items() if n != first)]
    with sdpa_kernel(order, set_priority=True):
        yield


def prefetch(items: Iterable[T], depth: int = 64) -> Iterator[T]:
    """``items`` made by a background thread up to ``depth`` ahead: test sequences are tokenized
    and NIAH prompts built while the GPU runs the previous batch (the tokenizers release the
    GIL). When the consumer stops early (an error, a break), the thread stops too and closes
    ``items``, rather than wait on a full queue for the rest of the process."""
    buffer: queue.Queue = queue.Queue(depth)
    done, stop = object(), threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                buffer.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def fill() -> None:
        source = iter(items)
        try:
            for item in source:
                if not put(item):
                    break
            else:
                put(done)
        except BaseException as err:  # raised again in the consumer
            put(err)
        finally:
            close = getattr(source, "close", None)
            if close is not None:  # a generator's with-blocks and finally-clauses run now
                close()

    threading.Thread(target=fill, daemon=True).start()
    try:
        while (item := buffer.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
