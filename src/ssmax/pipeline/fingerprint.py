"""A node's fingerprint: what its result depends on, hashed.

It covers the config keys the stage declares it reads (its SPEC; not logging or progress
settings), the fingerprints of its inputs, the source code of the modules the stage runs
(derived from its imports: ssmax.pipeline.stage_code), the data manifest (ssmax.data.identity)
and the content of the repository files the stage declares (SPEC.files).
Same fingerprint, same result: the node is skipped.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache

from omegaconf import DictConfig, OmegaConf

from ssmax.data.identity import data_manifest, data_shape
from ssmax.data.shards import manifest_sha
from ssmax.pipeline.stage_code import PACKAGE, stage_code
from ssmax.stages.spec import StageSpec

REPO = PACKAGE.parents[1]  # the checkout the pipeline plans from (its files: StageSpec.files)
FACTS = "facts"  # a variant's facts: a stage that acts on one declares it (variant.facts.<key>)


def select(cfg: DictConfig, keys: tuple[str, ...]) -> dict[str, object]:
    """The resolved values of dotted keys (missing ones count as None). "data:lm" is the data
    block without its SFT keys, so that an SFT setting does not re-run pretraining."""
    out: dict[str, object] = {}
    for key in keys:
        value = OmegaConf.select(cfg, "data" if key == "data:lm" else key, default=None)
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True)
        if key == "variant":  # the model's part; facts that shape a result are declared apart
            value = {k: v for k, v in value.items() if k != FACTS}
        if key.startswith("data"):  # where files live and how they are read: not the result
            value = data_shape(value, lm=key == "data:lm")
        out[key] = value
    return out


@cache
def code_hash(paths: tuple[str, ...]) -> str:
    """sha256 over the text of the given modules and packages (.py files, sorted)."""
    digest = hashlib.sha256()
    for rel in paths:
        target = PACKAGE / rel
        files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
        for file in files:
            digest.update(str(file.relative_to(PACKAGE)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def file_hash(rel: str) -> str | None:
    """sha256 of a file of the repository (relative to its root); None where it is absent."""
    path = REPO / rel
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def training_data(cfg: DictConfig) -> dict[str, object]:
    """What pretraining reads beyond its config: the prepared shards' manifest, or for a stream
    packed per (rank, DataLoader worker) the number of those shards (it shapes the rows)."""
    if cfg.data.shards_dir:
        return {"shards": manifest_sha(cfg.data.shards_dir)}
    if cfg.data.source == "slimpajama":
        t = cfg.trainer
        return {"stream_shards": t.devices * t.num_nodes * max(cfg.data.num_workers, 1)}
    return {}


def fingerprint(
    stage: str, module: str, spec: StageSpec, cfg: DictConfig, input_fingerprints: list[str]
) -> str:
    """The node's fingerprint from what its stage module (ssmax.stages.<module>) declares
    (its SPEC) and runs (its code)."""
    keys = spec.reads
    payload = {
        "stage": stage,
        "config": select(cfg, keys),
        "inputs": input_fingerprints,
        "code": code_hash(stage_code(module)),
        "data": data_manifest(cfg, sft="data" in keys)
        if any(k.startswith("data") for k in keys)
        else None,
    }
    if spec.trains and "data:lm" in keys:  # pretraining: the shards it reads
        payload |= training_data(cfg)
    if spec.files:  # only then: no other node's fingerprint moves
        payload["files"] = {rel: file_hash(rel) for rel in spec.files}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
