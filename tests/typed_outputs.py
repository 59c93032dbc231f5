"""Nodes' outputs for the tests that give a node only the fields a claim, a figure or the table
reads: each as its stage's declared type (ssmax.stages.outputs); a required field a test leaves
out empty by its type ({}, [] or None), nested ones too (`{"needle_scores": {"top_mean": 0.6}}`),
the others at their defaults."""

from __future__ import annotations

import typing
from dataclasses import MISSING, fields, is_dataclass
from typing import Any

from ssmax.stages.outputs import outputs_from
from ssmax.stages.spec import stage_spec

# a reported name -> the stage module whose outputs a test's node stands for
MODULES = {"pretrain": "pretrain", "eval_loss": "eval_loss", "eval_niah": "eval_niah",
           "export": "export"}  # fmt: skip


def typed(inputs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """{node (as reported, "eval_loss/a_softmax/seed0"): some of its outputs} -> typed."""
    return {node: outputs(MODULES[node.split("/")[0]], values) for node, values in inputs.items()}


def outputs(module: str, values: dict[str, Any]) -> Any:
    """ssmax.stages.<module>'s Outputs with these fields, the others empty or default."""
    cls = stage_spec(module).outputs
    assert cls is not None, module
    return outputs_from(cls, _filled(cls, values), f"a test's {module} node")


def _filled(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    empty = {dict: {}, list: []}
    out = {f.name: empty.get(typing.get_origin(hints[f.name])) for f in fields(cls)
           if f.init and f.default is MISSING and f.default_factory is MISSING}  # fmt: skip
    for name, value in values.items():
        nested = [t for t in typing.get_args(hints[name]) or (hints[name],) if is_dataclass(t)]
        out[name] = _filled(nested[0], value) if nested and isinstance(value, dict) else value
    return out
