"""Export: the variant's trained models (its first node's, and its SFT's where it has one) as
folders `transformers.AutoModelForCausalLM.from_pretrained` loads (ssmax.export), in hf/<stage>/
of the node's folder. Each is also logged as an MLflow model in the run that trained it and
registered as a version of ssmax-<variant> (ssmax.tracking.models).

The folders are at the training theta; theta x50 is a config edit (docs/models-out.md).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from ssmax.export import require_transformers
from ssmax.stages.costing import BYTES_WEIGHTS, StageCost, parameters
from ssmax.stages.outputs import Trained
from ssmax.stages.spec import StageSpec
from ssmax.tracking.models import log_model
from ssmax.tracking.store import mlflow_client, offline, tracking_uri, use_node_store

if TYPE_CHECKING:  # annotations only: a stage's code is what it runs (pipeline.stage_code)
    from omegaconf import DictConfig

    from ssmax.stages.context import StageContext


@dataclass(frozen=True)
class Outputs:
    """Per stage exported (its start's, its SFT's): its transformers folder and, tracked, its
    registered MLflow model version (ssmax.tracking.models.log_model's description; {}: none
    registered, and records made before 2026-11-25)."""

    models: dict[str, str]
    registered: dict[str, dict[str, Any]] = field(default_factory=dict)


# The weights' fingerprints cover model, variant and data already; declared as read here
# because the export builds the model and its tokenizer from them.
SPEC = StageSpec(
    reads=("model", "variant", "data:lm"),
    uses=("data", "seed"),
    reported_as="export",  # the report's table of models (report.build.model_rows)
    outputs=Outputs,
)


def cost(cfg: DictConfig, stage: str, inputs: list[str]) -> StageCost:
    """No compute worth counting; each input's model twice on disk: its folder and its MLflow
    copy."""
    return StageCost(disk=parameters(cfg) * BYTES_WEIGHTS * 2 * len(inputs))


def run(ctx: StageContext) -> Outputs:
    require_transformers()
    # lazy: an optional dependency: export.folder imports transformers (the group [hf]), which
    # require_transformers names in one line where it is missing
    from ssmax.export.folder import trained_model, write_export

    models, registered = {}, {}
    tracked = bool(ctx.cfg.tracking.enabled)
    for name, outputs in ctx.inputs.items():
        trained: Trained = outputs  # its start's and its SFT's node: training stages
        stage = name.split("/")[0]
        dest = ctx.out_dir / "hf" / stage
        shutil.rmtree(dest, ignore_errors=True)  # an attempt of this node that did not finish
        info = {"node": name, "fingerprint": ctx.fingerprints.get(name, ""),
                "seed": ctx.cfg.seed, "preset": str(ctx.cfg.preset.name)}  # fmt: skip
        write_export(trained_model(ctx.cfg, trained.weights), ctx.cfg.data, dest, 1.0, info)
        models[stage] = str(dest)
        if tracked and trained.run_id:
            registered[stage] = register(ctx, trained.run_id, dest, name)
    return Outputs(models, registered)


def register(ctx: StageContext, run_id: str, folder: Any, source: str) -> dict[str, Any]:
    """The model in the run that trained it, a version of ssmax-<variant>."""
    cfg = ctx.cfg
    if offline(cfg):  # the run that trained it is in that node's own store
        cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
        use_node_store(cfg, ctx.input_dirs[source])
    trained = mlflow_client(tracking_uri(cfg)).get_run(run_id).data.tags
    tags = {
        "preset": ctx.cfg.preset.name, "seed": ctx.cfg.seed, "stage": source.split("/")[0],
        "node": source, "fingerprint": trained.get("fingerprint", ""),
        "export_node": ctx.name, "export_fingerprint": (ctx.tags or {}).get("fingerprint", ""),
    }  # fmt: skip
    return log_model(cfg, run_id, folder, str(ctx.cfg.variant.name), tags)
