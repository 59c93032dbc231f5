"""Measured throughput per GPU: what `make bench` wrote on a GPU (bench/throughput.json), read by
`plan` (ssmax.pipeline.plan_cost) in place of an assumed MFU.

The file maps a device name (torch.cuda.get_device_name()) to a model (conf/model/<name>.yaml)
to one rate per kind of node, each with where it came from:

    {"NVIDIA H100 80GB HBM3": {"llama_162m": {
        "train": {"value": 409834, "unit": "tokens/s", "length": 1024, "batch": 32,
                  "measured": "2026-11-24", "commit": "5cb1d89", "how": "..."},
        "eval_loss": {"value": 0.22, "unit": "s/sequence", "length": 20001, ...},
        "niah": {"value": 0.104, "unit": "s/sample", "length": 8192, ...}}}}

train: tokens per second of the training step at sequence length ``length``; eval_loss: seconds
per test sequence of ``length`` tokens (Fig. 5); niah: seconds per needle sample at a context of
``length`` tokens (prefill and greedy decoding, Fig. 6).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ssmax.files.atomic import atomic_write_json
from ssmax.files.flock import exclusive

DEFAULT_FILE = Path(__file__).resolve().parents[3] / "bench" / "throughput.json"
KINDS = {"train": "tokens/s", "eval_loss": "s/sequence", "niah": "s/sample"}
LABELS = {"train": "training", "eval_loss": "Fig. 5 loss", "niah": "NIAH"}  # in `make plan`


@dataclass(frozen=True)
class Rate:
    """One measured rate (see the module doc) and the device it was measured on."""

    kind: str
    value: float
    length: int
    device: str
    measured: str
    how: str = ""
    commit: str = ""
    batch: int | None = None

    def describe(self) -> str:
        """e.g. '220.0 ms per sequence of 20,001 tokens, batch 8 (measured: NVIDIA H100 ...)'."""
        if self.kind == "train":
            what = f"{self.value:,.0f} tokens/s at sequence length {self.length:,}"
        else:
            per = "sequence of" if self.kind == "eval_loss" else "sample at"
            what = f"{self.value * 1e3:,.1f} ms per {per} {self.length:,} tokens"
        what += f", batch {self.batch}" if self.batch else ""
        where = ", ".join(x for x in (self.device, self.measured, self.commit) if x)
        return f"{what} (measured: {where}{'; ' + self.how if self.how else ''})"


def resolve(path: str | Path | None) -> Path:
    return Path(path) if path else DEFAULT_FILE


def load(path: str | Path | None = None) -> dict[str, Any]:
    """The file's contents ({} when it does not exist). A file that is not JSON: ValueError."""
    p = resolve(path)
    if not p.exists():
        return {}
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(
            f"cost.measured_file={p} is not JSON ({err.msg}, line {err.lineno})"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"cost.measured_file={p} must hold an object of device names")
    return data


def lookup(data: dict[str, Any], gpu: str, model: str, kind: str) -> Rate | None:
    """The rate of ``kind`` for ``model`` on the first device whose name contains ``gpu``
    (case-insensitive, e.g. "H100" finds "NVIDIA H100 80GB HBM3"), or None."""
    for device, models in data.items():
        if gpu.lower() in device.lower() and kind in models.get(model, {}):
            entry = models[model][kind]
            return Rate(
                kind,
                float(entry["value"]),
                int(entry["length"]),
                device,
                str(entry.get("measured", "?")),
                str(entry.get("how", "")),
                str(entry.get("commit", "")),
                entry.get("batch"),
            )
    return None


def record(path: str | Path | None, device: str, model: str, kind: str, **entry: Any) -> None:
    """Write one measured rate (value, length, measured, ...; the unit is the kind's) into the
    file, keeping every other entry; read-modify-write under a lock, written atomically."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}; allowed: {tuple(KINDS)}")
    p = resolve(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(str(p) + ".lock"):
        data = load(p)
        data.setdefault(device, {}).setdefault(model, {})[kind] = {**entry, "unit": KINDS[kind]}
        atomic_write_json(p, data, indent=1, sort_keys=True)
