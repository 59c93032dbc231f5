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

from ssmax.tracking.store import mlflow_client, offline, tracking_uri

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

    client = mlflow_client(tracking_uri(cfg))
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
    client.create_registered_model(name, description=f"ssmax-repro, variant {variant}")
    found = register_version(client, tracking_uri(cfg), name, f"models:/{logged.model_id}",
                             run_id, tags, model_id=logged.model_id)  # fmt: skip
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


def register_version(
    client: Any, uri: str, name: str, source: str, run_id: str, tags: dict[str, str],
    model_id: str | None = None, description: str | None = None,
) -> Any:  # fmt: skip
    """A new version of name in client's store (at uri) from source; one made from a
    LoggedModel (model_id, source models:/<model_id>) is linked both ways, as
    mlflow.register_model links them."""
    with _registry_finds_models(uri):
        made = client.create_model_version(name, source, run_id, tags=tags,
                                           description=description, model_id=model_id)  # fmt: skip
    if model_id:
        _link_version(client, model_id, name, made.version)
    return made


def logged_model_id(version: Any) -> str | None:
    """The LoggedModel a version was registered from: its model_id, else its models:/m-<id>
    source (the sqlite registry's search and get leave model_id out)."""
    rest = version.source.removeprefix("models:/")
    from_source = rest if rest.startswith("m-") and "/" not in rest else None
    return version.model_id or from_source


def _link_version(client: Any, model_id: str, name: str, version: str | int) -> None:
    """The LoggedModel's list of its registered versions (the UI's link from the model to
    them), kept as mlflow.register_model keeps it."""
    from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

    known = client.get_logged_model(model_id).tags.get(MLFLOW_MODEL_VERSIONS)
    versions = [*json.loads(known or "[]"), {"name": name, "version": version}]
    client.set_logged_model_tags(model_id, {MLFLOW_MODEL_VERSIONS: json.dumps(versions)})


def _registry_finds_models(uri: str) -> AbstractContextManager[None]:
    """While a version of a models:/<id> source is created in uri: MLflow's sqlite registry
    looks the LoggedModel up through the global tracking URI, not its client's (a TODO in
    its create_model_version), which names another store or none (an offline node's own)."""
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    return _use_tracking_uri(uri)
