"""A BundleRun checkpoint (ssmax.lit.bundle.run) cut down to some of its seeds: a bundle started
again with fewer seeds goes on from the furthest checkpoint that holds them all."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def sliced(state: dict[str, Any], seeds: Sequence[int]) -> dict[str, Any]:
    """A BundleRun checkpoint of these seeds, taken from one of more seeds: each seed's slice
    of every stacked tensor (weights, AdamW's moments, losses), in the order of `seeds`."""
    index = [list(state["seeds"]).index(s) for s in seeds]
    pick = torch.tensor(index)

    def take(t: torch.Tensor, dim: int = 0) -> torch.Tensor:
        return t.index_select(dim, pick.to(t.device)).clone()

    optimizer = {
        "state": {key: {n: take(v) if torch.is_tensor(v) and v.ndim > 0 else v
                        for n, v in per_param.items()}
                  for key, per_param in state["optimizer"]["state"].items()},
        "param_groups": state["optimizer"]["param_groups"],
    }  # fmt: skip
    last = state["last_batch"]
    return state | {
        "seeds": list(seeds),
        "params": {n: take(p) for n, p in state["params"].items()},
        "optimizer": optimizer,
        "losses": take(state["losses"], 1),
        "grad_norms": take(state["grad_norms"], 1),
        "last_batch": None if last is None else take(last),
        "val": {step: take(v) for step, v in state["val"].items()},
        "data": [state["data"][i] for i in index],
        "tokens": [state["tokens"][i] for i in index] if "tokens" in state else None,
    }
