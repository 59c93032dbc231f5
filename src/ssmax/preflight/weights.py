"""Weights to start from (init_from: (e)'s softmax weights, SFT's pretrained model, a resumed
(f)): read from a model.pt or a Lightning .ckpt, and checked against the configured model.
Apart from ssmax.preflight.input_files' file checks because this shapes results (what a run
starts from) and they do not (ssmax.pipeline.stage_code)."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig

from ssmax.config.compose import ConfigError
from ssmax.model import load_backbone
from ssmax.model.factory import build_model
from ssmax.model.transformer import VARIANT_PARAMS


def read_weights(path: str | Path, key: str = "init_from") -> dict[str, torch.Tensor]:
    """A Transformer state dict from a model.pt or a Lightning .ckpt (keys under 'model.');
    anything else is a ConfigError naming the file."""
    where = f"{key}={path}"
    file = Path(path)
    if not file.exists():
        raise ConfigError(f"{where}: no such file; give a run's model.pt or a Lightning .ckpt")
    if not file.is_file():
        raise ConfigError(f"{where} is a folder; give a run's model.pt or a Lightning .ckpt")
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # pickle, zip and I/O errors alike: the file is no checkpoint
        with open(file, "rb") as handle:
            head = handle.read(4)
        if head.startswith((b"PK\x03\x04", b"\x80")):  # torch.save's zip, or its old pickle
            line = (str(err).strip().splitlines() or [type(err).__name__])[0][:100]
            reason = f"truncated or damaged: {line}"
        else:
            reason = f"not a file torch.save wrote: it begins {head!r}"
        raise ConfigError(
            f"{where} does not load as a PyTorch checkpoint ({reason}); give a run's model.pt "
            "or a Lightning .ckpt"
        ) from None
    if isinstance(state, dict) and "state_dict" in state:
        state = {k.removeprefix("model."): v for k, v in state["state_dict"].items()}
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(f"{where} holds no state dict of tensors; give a run's model.pt or .ckpt")
    return state


def _describe(shapes: dict[str, tuple[int, ...]]) -> str:
    """A model's size as read from its tensors' shapes."""
    emb = shapes.get("tok_emb.weight")
    ffn = shapes.get("layers.0.ffn.w1.weight")
    layers = {k.split(".")[1] for k in shapes if k.startswith("layers.")}
    if emb is None or len(emb) != 2:
        return "no tok_emb.weight: not this project's model"
    return f"vocab {emb[0]}, dim {emb[1]}, {len(layers)} layers" + (
        f", ffn_dim {ffn[0]}" if ffn else ""
    )


def check_fits(
    cfg: DictConfig,
    state: dict[str, torch.Tensor],
    key: str = "init_from",
    model: torch.nn.Module | None = None,
    path: str | Path | None = None,
) -> None:
    """The weights fit the configured model and variant: every tensor present with its shape;
    only the variant's own scalars (s, b, p_n) may be absent (ssmax.model.load_backbone).
    model: the one they go into (a process that builds none, a check before any work, compares
    with one on the meta device: shapes only). path: the file, as the message names it (else
    cfg's `key`)."""
    if model is None:
        with torch.device("meta"):  # shapes only: no memory, no init
            model = build_model(cfg)
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    have = {k: tuple(v.shape) for k, v in state.items()}
    m = cfg.model
    sizes = (
        f"the checkpoint: {_describe(have)}; model={m.name}: {_describe(want)}; set model= or "
        "preset= (and data.vocab_size) as in the run that wrote it"
    )
    where = f"{key}={path or getattr(cfg, key, None) or '?'}"
    for name, shape in want.items():
        if name in have and have[name] != shape:
            raise ConfigError(
                f"{where} does not fit the model: {name} is {list(have[name])} there, "
                f"{list(shape)} here ({sizes})"
            )
    missing = [k for k in want if k not in have and not k.endswith(VARIANT_PARAMS)]
    if missing:
        raise ConfigError(f"{where} lacks {missing[0]} (and {len(missing) - 1} more; {sizes})")
    extra = [k for k in have if k not in want]
    if extra:
        raise ConfigError(
            f"{where} holds {extra[0]}, which variant={cfg.variant.name} has no place for "
            "(weights of another variant: SSMax weights do not go into softmax)"
        )


def load_init(model: torch.nn.Module, cfg: DictConfig, path: str | Path) -> None:
    """The weights at `path` into `model` as a training run starts from them (its plan's
    init_from): read, checked against the model's own shapes in one line (check_fits), loaded
    with the variant's own scalars keeping their init where the file has none (load_backbone)."""
    state = read_weights(path)
    check_fits(cfg, state, model=model, path=path)
    load_backbone(model, state)
