"""`python -m ssmax.export` (`make export`): a trained model as a folder that
`transformers.AutoModelForCausalLM.from_pretrained` loads (ssmax.export.folder).

    python -m ssmax.export --node sft/b_ssmax/seed0 [--out DIR] [--rope-factor F] [overrides]
    python -m ssmax.export --weights RUN/model.pt [--config RUN/config.yaml] --out DIR

--node names a finished node of the pipeline the overrides select (preset=, pipeline.file=,
paths.output_dir=, as given to `make reproduce-all`); a rope_* node exports at its theta (x50).
--rope-factor F writes rope_theta x F into config.json (the training theta by default).
Bad input: one line naming what is wrong and what is allowed, status 2, nothing written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ssmax.config.compose import ConfigError, debug
from ssmax.export import require_transformers
from ssmax.host.cli import Parser
from ssmax.pipeline.run import plan
from ssmax.preflight.weights import read_weights
from ssmax.stages.outputs import read_outputs


def run_config(path: Path) -> DictConfig:
    if not path.is_file():
        raise ConfigError(f"--config={path}: no such file; allowed: the config.yaml beside a "
                          "run's model.pt (or a node's folder)")  # fmt: skip
    cfg = OmegaConf.load(path)
    lacking = [k for k in ("model", "variant", "data") if k not in cfg]
    if lacking:
        raise ConfigError(f"--config={path} has no {lacking[0]}: not a run's config; allowed: "
                          "the config.yaml beside a run's model.pt")  # fmt: skip
    return cfg


def check_out(out: Path) -> None:
    """out must be new, and the nearest folder above it that exists a folder (not a file)."""
    if out.exists():
        raise ConfigError(f"--out={out} exists; allowed: a path that does not exist yet")
    above = next(p for p in out.absolute().parents if p.exists())
    if not above.is_dir():
        raise ConfigError(f"--out={out}: {above} is a file; allowed: a new path whose nearest "
                          "existing parent is a folder")  # fmt: skip


def node_source(node: str, overrides: list[str]) -> tuple[DictConfig, str, dict[str, Any]]:
    """(config, weights, provenance) of a finished pipeline node with weights."""
    _, jobs = plan(overrides)
    with_weights = [j for j in jobs if j.trains or j.module == "rope"]
    names = [j.name for j in with_weights]
    job = next((j for j in with_weights if j.name == node), None)
    if job is None:
        raise ConfigError(f"--node {node!r} is not a node with weights in this pipeline; "
                          f"allowed: {', '.join(names)}")  # fmt: skip
    if job.done is None:
        done = [j.name for j in with_weights if j.done is not None] or ["none yet"]
        raise ConfigError(f"--node {node} has no result in {job.dir} (make reproduce-all runs "
                          f"it); finished: {', '.join(done)}")  # fmt: skip
    outputs = read_outputs(job.module, job.done)  # a training stage's (Trained) or rope's
    cfg = OmegaConf.create(job.cfg_yaml)
    info = {
        "node": job.name, "fingerprint": job.fingerprint, "seed": job.seed,
        "preset": str(cfg.preset.name),
        "rope_factor": outputs.rope_factor if job.module == "rope" else 1.0,  # the evals' theta
    }  # fmt: skip
    return cfg, outputs.weights, info


def main(argv: list[str] | None = None) -> int:
    parser = Parser(
        "ssmax.export", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--node", help="stage/variant/seed<k>, e.g. sft/b_ssmax/seed0")
    source.add_argument("--weights", help="a model.pt or Lightning .ckpt")
    parser.add_argument("--config", help="the run's config.yaml (default: beside --weights)")
    parser.add_argument("--out", help="the folder to write (must not exist)")
    parser.add_argument("--rope-factor", type=float, help="rope_theta x this in config.json")
    try:
        args, overrides = parser.parse_known_args(argv)
        require_transformers()
        # lazy: an optional dependency: export.folder imports transformers (the group [hf]),
        # which require_transformers names in one line where it is missing
        from ssmax.export.folder import check_rope_factor, trained_model, write_export

        bad = [o for o in overrides if o.startswith("-") or "=" not in o]
        if bad or (args.weights and overrides):
            raise ConfigError(f"argument {(bad or overrides)[0]!r} is unknown; allowed: --node, "
                              "--weights, --config, --out, --rope-factor, and with --node "
                              "pipeline overrides key=value")  # fmt: skip
        if args.node:
            cfg, weights, info = node_source(args.node, overrides)
            default = Path(cfg.paths.output_dir) / "export" / args.node.replace("/", "-")
        else:
            weights, info = args.weights, {"weights": str(args.weights)}
            if not Path(weights).is_file():  # named before the config.yaml looked for beside it
                read_weights(weights, key="--weights")  # raises: no such file, or a folder
            cfg = run_config(Path(args.config or Path(args.weights).parent / "config.yaml"))
            default = None
        out = Path(args.out) if args.out else default
        if out is None:
            raise ConfigError("--out is required with --weights; allowed: a new folder's path")
        check_out(out)
        factor = args.rope_factor if args.rope_factor is not None else info.pop("rope_factor", 1.0)
        check_rope_factor(factor, "--rope-factor")  # inf and nan too: JSON cannot hold them
        info.pop("rope_factor", None)
        write_export(trained_model(cfg, weights), cfg.data, out, factor, info)
    except (ConfigError, ValueError) as err:  # ConfigError: a ValueError in one line
        if debug():
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"exported {args.node or args.weights} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
