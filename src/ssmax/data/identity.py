"""The data's identity: which files a data setting names, which data settings shape what is
read, and what identifies the data itself (the config only names it).

Read by the node fingerprints (ssmax.pipeline.fingerprint) and by the MLflow dataset inputs of
a training run (ssmax.tracking.datasets): one definition, so that two runs on different data
differ in both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ssmax.data.corpus import embedded_sha

SFT_KEYS = ("sft_", "squad_files", "hf_squad")
# where data lives and how it is read; the shards' content counts instead (the fingerprint's
# training_data)
LOCAL_DATA_KEYS = ("cache_dir", "num_workers", "shards_dir", "prepare_num_proc",
                   "prepare_files_per_shard")  # fmt: skip


def listed_files(value: Any) -> list[str]:
    """The files of a setting: one path, a list, or a mapping split -> path(s)."""
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
    if isinstance(value, dict):
        return [f for v in value.values() for f in listed_files(v)]
    return [str(value)] if isinstance(value, str) else [str(v) for v in value]


def data_shape(value: dict[str, Any], lm: bool = False) -> dict[str, Any]:
    """The settings of a resolved data block that shape what is read: not where files live
    and how they are read; lm ("data:lm"): not the SFT set's either, so that an SFT setting
    does not re-run pretraining."""
    value = {k: v for k, v in value.items() if k not in LOCAL_DATA_KEYS}
    if lm:
        value = {k: v for k, v in value.items() if not k.startswith(SFT_KEYS)}
    return value


def local_files(value: object) -> list[object]:
    """The identity of the local files a data setting names: [path, bytes, mtime in ns] of each
    (a file edited in place changes it), its path alone where there is no such file. Not a hash
    of the content: local SlimPajama files run to terabytes, and every plan reads this."""
    out: list[object] = []
    for path in listed_files(value) if value else []:
        try:
            st = Path(path).stat()
        except OSError:
            out.append(path)
        else:
            out.append([path, st.st_size, st.st_mtime_ns])
    return out


def data_manifest(cfg: DictConfig, sft: bool = False) -> str:
    """Identifies the data itself (the config only names it); sft: the SFT set's local files
    too, where the node reads them."""
    if cfg.data.source == "embedded":
        manifest = embedded_sha()
    else:
        manifest = json.dumps([cfg.data.hf_slimpajama, local_files(cfg.data.slimpajama_files)])
    if sft and cfg.data.sft_source == "squad_v2" and cfg.data.squad_files:
        manifest = json.dumps([manifest, local_files(cfg.data.squad_files)])
    return manifest
