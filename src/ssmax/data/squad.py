"""SQuAD 2.0 format QA data: the hub, local files (official nested json, HF flat jsonl/parquet)
or the set generated from the embedded corpus, filtered as in the paper (Sec. 3.3)."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig

from ssmax.data.corpus import split_of
from ssmax.data.hub import offline, require_hub
from ssmax.data.squad_gen import generate_squad
from ssmax.data.squad_schema import squad_features

SFT_SPLITS = ("train", "validation")


def flatten_nested(obj: dict) -> list[dict]:
    """Official SQuAD json ({"data": [{"title", "paragraphs": [{"context", "qas"}]}]}) -> rows."""
    rows = []
    for article in obj["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                answers = qa.get("answers", [])
                rows.append(
                    {
                        "id": str(qa["id"]),
                        "title": article.get("title", ""),
                        "context": para["context"],
                        "question": qa["question"],
                        "answers": {
                            "text": [a["text"] for a in answers],
                            "answer_start": [int(a["answer_start"]) for a in answers],
                        },
                    }
                )
    return rows


def _read_local(files: list[str]):
    import datasets

    parts = []
    for f in files:
        path = Path(f)
        if not path.exists():
            raise FileNotFoundError(f"data.squad_files: no such file {f}")
        if path.suffix == ".json":  # the official nested format
            rows = flatten_nested(json.loads(path.read_text(encoding="utf-8")))
            parts.append(datasets.Dataset.from_list(rows, features=squad_features()))
            continue
        kind = "parquet" if path.suffix == ".parquet" else "json"
        with offline():
            ds = datasets.load_dataset(kind, data_files=str(path), split="train")
        parts.append(ds.select_columns(list(squad_features())).cast(squad_features()))
    return datasets.concatenate_datasets(parts)


def has_answer(ex: dict) -> bool:
    """The paper's filter: context, question and answer text all non-empty."""
    texts = ex["answers"]["text"]
    return bool(ex["context"].strip() and ex["question"].strip() and texts and texts[0].strip())


def _hash_split(ds, split: str, val_fraction: float):
    # Split by example id so the assignment ignores file order.
    keep = [i for i, k in enumerate(ds["id"]) if split_of(k, val_fraction, 0.0) == split]
    return ds.select(keep)


def load_squad(data_cfg: DictConfig, split: str, filtered: bool = True):
    """SQuAD-2.0-format datasets.Dataset (id, title, context, question, answers) for SFT.

    data.sft_source: squad_v2 (data.squad_files, else the hub's train/validation splits) or
    generated. data.squad_files: a mapping split -> file(s), or file(s) split by a hash of the
    id with data.sft_val_fraction.
    """
    if split not in SFT_SPLITS:
        raise ValueError(f"split={split!r}; allowed: {SFT_SPLITS}")
    source = data_cfg.sft_source
    if source == "generated":
        ds = _hash_split(generate_squad(data_cfg), split, float(data_cfg.sft_val_fraction))
    elif source == "squad_v2":
        local = data_cfg.squad_files
        if local:
            by_split = isinstance(local, DictConfig | dict)
            files = local[split] if by_split else local
            ds = _read_local([files] if isinstance(files, str) else [str(f) for f in files])
            if not by_split:
                ds = _hash_split(ds, split, float(data_cfg.sft_val_fraction))
        else:
            import datasets

            require_hub(data_cfg.hf_squad, "data.squad_files")
            ds = datasets.load_dataset(data_cfg.hf_squad, split=split)
    else:
        raise ValueError(f"data.sft_source={source!r}; allowed: ('generated', 'squad_v2')")
    return ds.filter(has_answer) if filtered else ds
