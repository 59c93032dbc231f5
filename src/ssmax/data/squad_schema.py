"""The SQuAD 2.0 columns, shared by the real set (squad.py) and its generated stand-in
(squad_gen.py)."""

from __future__ import annotations

from typing import Any


def squad_features() -> Any:  # datasets.Features (imported lazily: it is slow)
    import datasets

    return datasets.Features(
        {
            "id": datasets.Value("string"),
            "title": datasets.Value("string"),
            "context": datasets.Value("string"),
            "question": datasets.Value("string"),
            "answers": {
                "text": datasets.List(datasets.Value("string")),
                "answer_start": datasets.List(datasets.Value("int32")),
            },
        }
    )
