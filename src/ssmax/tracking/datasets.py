"""The data a training run reads, as MLflow dataset inputs (mlflow.data): one per split it
trains and validates on, with a name, a source (the hub dataset or the local files, as
`datasets.load_dataset` is called), a digest (of the data's identity and the settings that
shape it: two runs on different data differ) and its split. The MLflow UI shows them in the
runs list's Dataset column.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ssmax.data.corpus import EMBEDDED_FILE, embedded_sha
from ssmax.data.identity import data_manifest, data_shape
from ssmax.data.shards import manifest_sha

CONTEXT = {"train": "training", "validation": "validation"}  # MLflow's context tag values


def _files(value: Any, split: str) -> Any:
    value = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    return value.get(split, value) if isinstance(value, dict) else value


def describe_data(cfg: DictConfig, split: str) -> tuple[str, dict[str, Any], Any]:
    """(name, load_dataset arguments for the source, identity to hash) of the split the run
    reads: its pretraining text or its SFT set."""
    d = cfg.data
    block = OmegaConf.to_container(d, resolve=True)
    if cfg.objective == "sft":
        shape = {k: v for k, v in data_shape(block).items() if k.startswith("sft_")}
        if d.sft_source == "generated":
            source = {"path": "json", "data_files": str(EMBEDDED_FILE)}
            return "squad-generated", source, [embedded_sha(), shape]
        if d.squad_files:
            files = _files(d.squad_files, split)
            return "squad_v2-local", {"path": "json", "data_files": files}, [files, shape]
        return "squad_v2", {"path": str(d.hf_squad)}, [str(d.hf_squad), shape]
    shape = data_shape(block, lm=True)
    if d.shards_dir:
        source = {"path": "ssmax-shards", "data_dir": str(d.shards_dir)}
        return "slimpajama-shards", source, [manifest_sha(d.shards_dir), shape]
    if d.source == "embedded":
        return (
            "austen",
            {"path": "json", "data_files": str(EMBEDDED_FILE)},
            [
                data_manifest(cfg),
                shape,
            ],
        )
    if d.slimpajama_files:
        files = _files(d.slimpajama_files, split)
        return "slimpajama-local", {"path": "json", "data_files": files}, [files, shape]
    return "slimpajama", {"path": str(d.hf_slimpajama)}, [str(d.hf_slimpajama), shape]


def digest(identity: Any, split: str) -> str:
    blob = json.dumps([identity, split], sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def dataset_inputs(cfg: DictConfig) -> list[Any]:
    """mlflow.entities.DatasetInput of the train and validation splits."""
    from mlflow.data.huggingface_dataset_source import HuggingFaceDatasetSource
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    inputs = []
    for split, context in CONTEXT.items():
        name, source, identity = describe_data(cfg, split)
        dataset = MetaDataset(
            HuggingFaceDatasetSource(**source, split=split),
            name=f"{name}-{split}",
            digest=digest(identity, split),
        )
        tags = [InputTag(MLFLOW_DATASET_CONTEXT, context), InputTag("split", split)]
        inputs.append(DatasetInput(dataset._to_mlflow_entity(), tags=tags))
    return inputs


def log_datasets(client: Any, run_id: str, cfg: DictConfig) -> None:
    """The run's data as MLflow dataset inputs (the UI's Dataset column)."""
    client.log_inputs(run_id, datasets=dataset_inputs(cfg))
