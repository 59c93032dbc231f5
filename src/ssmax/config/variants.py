"""Each variant's facts, read from the `facts:` block of its conf/variant/<name>.yaml.

The model reads the rest of the YAML (ssmax.model.VariantConfig); the pipeline, the stages, the
report, the claims, the plots and the cost table read these facts, never a list of names:

    letter       how the claims name it (Sec. 3: a-f)
    label        its name in figures and tables
    color        its matplotlib colour
    start        null: pretrained from scratch; else {variant, checkpoint}: it starts from that
                 variant's pretrain output `checkpoint` (weights: the final ones; switch_point:
                 those at protocol.switch_fraction, then trains the rest) (Sec. 3 (e), (f))
    evals        whether it goes through SFT and the evals (the p_n model does not: Fig. 2 only)
    pretrain     full, or short: protocol.pn_fraction of the steps (Sec. 2.1)
    curve        whether Fig. 4 shows its pretraining curve
    inherit      chain stages whose node takes the start variant's node of that stage as it is
                 (no training under this law): (g) applies Qwen's law at inference only, so
                 its SFT model is (a)'s

A variant's YAML inherits its parents' facts through its `defaults:` list, as Hydra does; what
it leaves out takes the schema's default (ssmax.config.schema.VariantSchema, VariantFacts).
The merge is done here, not by Hydra's compose, which costs a process that reads every
variant's facts a few seconds at start (docs/development.md, "Measured"); tests/test_config.py
holds the two merges equal for every preset and variant.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from omegaconf import OmegaConf

from ssmax.config.compose import CONF_DIR
from ssmax.config.schema import VariantFacts, VariantSchema

VARIANT_DIR = CONF_DIR / "variant"
CHECKPOINTS = ("weights", "switch_point")  # outputs of a pretrain node a variant may start from


@dataclass(frozen=True)
class Facts:
    """A variant's name and its facts (their defaults and docs: config.schema.VariantFacts)."""

    name: str
    letter: str
    label: str
    color: str
    start: dict[str, str] | None
    evals: bool
    pretrain: str
    curve: bool
    inherit: list[str]


def _raw(name: str) -> dict[str, Any]:
    """The variant's YAML merged over its defaults (the simple `- parent` / `- _self_` lists)."""
    path = VARIANT_DIR / f"{name}.yaml"
    if not path.exists():
        raise ValueError(f"variant {name!r} is unknown; allowed: {', '.join(names())}")
    own = OmegaConf.to_container(OmegaConf.load(path))
    merged: dict[str, Any] = {}
    for parent in own.pop("defaults", []):
        if parent != "_self_":
            merged = OmegaConf.to_container(OmegaConf.merge(merged, _raw(parent)))
    return OmegaConf.to_container(OmegaConf.merge(merged, own))


@cache  # read-only for its callers; the report asks per claim and per figure
def full(name: str) -> dict[str, Any]:
    """The variant's YAML over the schema's defaults: every key, typed."""
    return OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(VariantSchema), _raw(name)))


@cache
def facts(name: str) -> Facts:
    raw = _raw(name).get("facts") or {}
    allowed = {f.name for f in fields(VariantFacts)}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ValueError(f"conf/variant/{name}.yaml: facts.{unknown[0]} is unknown; "
                         f"allowed: {', '.join(sorted(allowed))}")  # fmt: skip
    result = Facts(name=name, **full(name)["facts"])
    if result.inherit and result.start is None:
        raise ValueError(f"conf/variant/{name}.yaml: facts.inherit needs facts.start (whose "
                         "nodes it takes)")  # fmt: skip
    if result.start is not None and result.start.get("checkpoint") not in CHECKPOINTS:
        raise ValueError(f"conf/variant/{name}.yaml: facts.start.checkpoint must be one of "
                         f"{CHECKPOINTS}")  # fmt: skip
    return result


def names() -> list[str]:
    """Every variant, in the order of its file name (its letter first: a_ ... f_, then the rest)."""
    return sorted(p.stem for p in VARIANT_DIR.glob("*.yaml"))


def ordered(variants: list[str] | set[str]) -> list[str]:
    """The given variants in the order of names()."""
    order = {v: i for i, v in enumerate(names())}
    return sorted(variants, key=lambda v: (order.get(v, len(order)), v))


def by_letter() -> dict[str, str]:
    """letter -> variant (the claims' short names)."""
    return {facts(v).letter: v for v in names()}


def model_key(variant: str, key: str) -> object:
    """One key of the variant's model part (e.g. scale), for the report's figures."""
    return full(variant)[key]


def learns_p_n(variant: str) -> bool:
    """The Sec. 2.1 rationale model: p_n learned per n (Fig. 2 and its claim)."""
    return model_key(variant, "scale") == "p_n"


def label(variant: str) -> str:
    return facts(variant).label if (VARIANT_DIR / f"{variant}.yaml").exists() else variant


def color(variant: str) -> str:
    return facts(variant).color if (VARIANT_DIR / f"{variant}.yaml").exists() else "k"


def with_starts(variants: list[str]) -> list[str]:
    """The variants plus those they start from (transitively), each after its start."""
    known = names()
    unknown = sorted(set(variants) - set(known))
    if unknown:
        raise ValueError(f"pipeline.variants: unknown {unknown}; allowed: {known}")
    out: list[str] = []

    def add(variant: str) -> None:
        start = facts(variant).start
        if start is not None and start["variant"] not in out:
            add(start["variant"])
        if variant not in out:
            out.append(variant)

    for variant in ordered(variants):
        add(variant)
    return out
