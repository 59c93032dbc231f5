"""Trained models in MLflow: an exported transformers folder (ssmax.export) logged as an MLflow
model (the transformers flavour: config, weights, tokenizer, an input example and the
signature it gives) of the run that trained it (a LoggedModel: MLflow 3's Models tab and the
run's Logged models), and registered as a version of ssmax-<variant>, tagged with preset,
seed, stage and the node's fingerprint.

Each version has the aliases of its stage (@sft: the newest) and of its preset, stage and seed
(@tiny-sft-seed0). Load one back: mlflow.pyfunc.load_model("models:/ssmax-b_ssmax@sft")
.predict(["prompt"]) (the exported generation config: greedy, never EOS), or
mlflow.transformers.load_model(...).
"""

from __future__ import annotations

import json
import logging
import tempfile
from contextlib import AbstractContextManager
from importlib.metadata import version
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ssmax.tracking import offline, tracking_uri

ARTIFACT = "model"  # the LoggedModel's name (one a training run)
INPUT_EXAMPLE = ["The special magic Tokyo number is: 8106422.\nWhat is the special magic number?"]
REQUIREMENTS = ("torch", "transformers", "safetensors", "tokenizers")


def registered_name(variant: str) -> str:
    return f"ssmax-{variant}"


def _components(folder: Path) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return {  # trust_remote_code: every law but softmax ships its modeling_ssmax.py
        "model": AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True),
        "tokenizer": AutoTokenizer.from_pretrained(folder, trust_remote_code=True),
    }


def log_model(cfg: DictConfig, run_id: str, folder: Path, variant: str, tags: dict) -> dict:
    """Log the folder as an MLflow model of run_id and register it; returns the version's
    name, version and models:/ URI."""
    import mlflow.transformers
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri(cfg))
    tags = {k: str(v) for k, v in tags.items()}
    experiment = client.get_run(run_id).info.experiment_id
    logged = client.create_logged_model(experiment, ARTIFACT, run_id, tags=tags)
    quiet = logging.getLogger("mlflow.transformers")  # no model card or license: a local model
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / ARTIFACT
            mlflow.transformers.save_model(
                _components(folder), path=str(path), task="text-generation",
                input_example=INPUT_EXAMPLE, metadata=tags,
                pip_requirements=[f"{p}=={version(p)}" for p in REQUIREMENTS],
            )  # fmt: skip
            client.log_model_artifacts(logged.model_id, str(path))
    finally:
        quiet.setLevel(level)
    client.finalize_logged_model(logged.model_id, "READY")
    name = registered_name(variant)
    try:  # first version of this variant (another node may create it at the same time)
        client.create_registered_model(name, description=f"ssmax-repro, variant {variant}")
    except MlflowException as err:
        if err.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    with registry_finds_models(tracking_uri(cfg)):
        found = client.create_model_version(name, f"models:/{logged.model_id}", run_id,
                                            tags=tags, model_id=logged.model_id)  # fmt: skip
    link_version(client, logged.model_id, name, found.version)
    names = aliases(tags)
    for alias in names:  # an alias names one version: the newest registered under it
        client.set_registered_model_alias(name, alias, found.version)
    # offline, the version is the node's own store's: its alias names it after a merge or sync
    uri = f"models:/{name}@{names[1]}" if offline(cfg) else f"models:/{name}/{found.version}"
    return {"name": name, "version": int(found.version), "uri": uri, "aliases": names}


def aliases(tags: dict[str, str]) -> list[str]:
    """The version's aliases: its stage (models:/ssmax-b_ssmax@sft, the newest SFT model of
    the variant) and its preset, stage and seed (@tiny-sft-seed0: that run's)."""
    stage = tags["stage"]
    return [stage, f"{tags['preset']}-{stage}-seed{tags['seed']}"]


def link_version(client: Any, model_id: str, name: str, version: str | int) -> None:
    """The LoggedModel's list of its registered versions (the UI's link from the model to
    them), kept as mlflow.register_model keeps it."""
    from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

    known = client.get_logged_model(model_id).tags.get(MLFLOW_MODEL_VERSIONS)
    versions = [*json.loads(known or "[]"), {"name": name, "version": version}]
    client.set_logged_model_tags(model_id, {MLFLOW_MODEL_VERSIONS: json.dumps(versions)})


def registry_finds_models(uri: str) -> AbstractContextManager[None]:
    """While a version of a models:/<id> source is created in uri: MLflow's sqlite registry
    looks the LoggedModel up through the global tracking URI, not its client's (a TODO in
    its create_model_version), which names another store or none (an offline node's own)."""
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    return _use_tracking_uri(uri)
