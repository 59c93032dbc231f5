"""Export: the variant's trained models (its first node's, and its SFT's where it has one) as
folders `transformers.AutoModelForCausalLM.from_pretrained` loads (ssmax.export), in hf/<stage>/
of the node's folder. Each is also logged as an MLflow model in the run that trained it and
registered as a version of ssmax-<variant> (ssmax.tracking.models).

The folders are at the training theta; theta x50 is a config edit (README, export).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ssmax.stages.spec import StageSpec

if TYPE_CHECKING:  # annotations only: a stage's code is what it runs (pipeline.code)
    from ssmax.stages.common import StageContext

# The weights' fingerprints cover model, variant and data already; declared as read here
# because the export builds the model and its tokenizer from them.
SPEC = StageSpec(
    reads=("model", "variant", "data:lm"),
    uses=("data", "seed"),
)


def run(ctx: StageContext) -> dict[str, Any]:
    from ssmax.export import require_transformers

    require_transformers()
    from ssmax.export.folder import trained_model, write_export  # imports transformers

    models, registered = {}, {}
    tracked = bool(ctx.cfg.tracking.enabled)
    for name, outputs in ctx.inputs.items():
        stage = name.split("/")[0]
        dest = ctx.out_dir / "hf" / stage
        shutil.rmtree(dest, ignore_errors=True)  # an attempt of this node that did not finish
        info = {"node": name, "fingerprint": trained_fingerprint(name, outputs["weights"]),
                "seed": ctx.cfg.seed, "preset": str(ctx.cfg.preset.name)}  # fmt: skip
        write_export(trained_model(ctx.cfg, outputs["weights"]), ctx.cfg.data, dest, 1.0, info)
        models[stage] = str(dest)
        if tracked and outputs.get("run_id"):
            registered[stage] = register(ctx, outputs["run_id"], dest, name)
    return {"models": models, "registered": registered}


def trained_fingerprint(name: str, weights: str) -> str:
    """The fingerprint of node `name`, from its done record in a folder above the weights it
    wrote (a stage is given its inputs' outputs, not their fingerprints)."""
    from ssmax.pipeline.state import read_record

    for folder in Path(weights).parents:
        record = read_record(folder)
        if record is not None and record.get("node") == name:
            return str(record["fingerprint"])
    raise RuntimeError(f"{name}: no done record of it in a folder above its weights {weights}")


def register(ctx: StageContext, run_id: str, folder: Any, source: str) -> dict[str, Any]:
    """The model in the run that trained it, a version of ssmax-<variant>."""
    from mlflow import MlflowClient

    from ssmax.tracking import tracking_uri
    from ssmax.tracking.models import log_model

    trained = MlflowClient(tracking_uri(ctx.cfg)).get_run(run_id).data.tags
    tags = {
        "preset": ctx.cfg.preset.name, "seed": ctx.cfg.seed, "stage": source.split("/")[0],
        "node": source, "fingerprint": trained.get("fingerprint", ""),
        "export_node": ctx.name, "export_fingerprint": (ctx.tags or {}).get("fingerprint", ""),
    }  # fmt: skip
    return log_model(ctx.cfg, run_id, folder, str(ctx.cfg.variant.name), tags)
