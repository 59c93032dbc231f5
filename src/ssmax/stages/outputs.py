"""A stage's outputs as a type: each stage module declares a frozen dataclass (its SPEC's
`outputs`), its `run` returns one, the engine writes it into the node's done record as a dict
(`to_record`: the JSON shape the records had when stages returned dicts) and reads an input's
record back through `read_outputs`. A key the record lacks, or one its stage does not declare,
is an error there, naming the node, its stage and the key; a field a reader names that the stage
does not write is an AttributeError, not a None.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, TypeVar

from ssmax.stages.spec import stage_spec

T = TypeVar("T")
OMIT = "omitted while default"  # field metadata: see omitted()


class OutputsError(ValueError):
    """A done record whose outputs do not match its stage's declared type."""


def omitted(default: Any = None) -> Any:
    """A field left out of the record while it holds its default: written only when the node
    computed it (eval_loss's planted facts, eval_niah's needle scores), as the dicts did."""
    return field(default=default, metadata={OMIT: True})


@dataclass(frozen=True, kw_only=True)
class Trained:
    """What every training stage (pretrain, switch, sft) writes: its weights, its losses at the
    end (None where it took no step or did not train), the MLflow run that trained it."""

    weights: str
    train_loss: float | None = None
    val_loss: float | None = None
    run_id: str | None = None


def fields_of(outputs: Any) -> dict[str, Any]:
    """A dataclass's fields as keyword arguments, one level deep (a subclass built from a
    base's values: a training stage's outputs from Trained)."""
    return {f.name: getattr(outputs, f.name) for f in fields(outputs)}


def to_record(outputs: Any) -> dict[str, Any]:
    """The outputs as the done record holds them: nested dataclasses as dicts, omitted()
    fields at their default left out."""
    out = {}
    for f in fields(outputs):
        value = getattr(outputs, f.name)
        if f.metadata.get(OMIT) and value == f.default:
            continue
        out[f.name] = to_record(value) if is_dataclass(value) else value
    return out


def outputs_from(cls: type[T], values: dict[str, Any], where: str) -> T:
    """A record's outputs as cls (a nested dataclass field read as its class); where: the node
    and its stage, for the error (OutputsError: a key missing or one cls does not declare)."""
    declared = {f.name: f for f in fields(cls) if f.init}  # type: ignore[arg-type]
    missing = sorted(n for n, f in declared.items() if n not in values and _required(f))
    unknown = sorted(set(values) - set(declared))
    problems = [f"lack {', '.join(missing)}"] if missing else []
    problems += [f"have {', '.join(unknown)}, which it does not declare"] if unknown else []
    if problems:
        name = f"{cls.__module__}.{cls.__qualname__}"
        raise OutputsError(f"{where}: its outputs {' and '.join(problems)} ({name})")
    hints = typing.get_type_hints(cls)
    return cls(**{k: _read(hints[k], v, f"{where}, {k}") for k, v in values.items()})


def read_outputs(module: str, record: dict[str, Any]) -> Any:
    """A done record's outputs as the type its stage module (ssmax.stages.<module>) declares,
    SPEC.outputs: how every reader gets a node's outputs (the engine, the report)."""
    where = f"{record['node']} (ssmax.stages.{module})"
    declared = stage_spec(module).outputs
    if declared is None:
        raise OutputsError(f"{where}: its stage declares no outputs type (StageSpec.outputs)")
    return outputs_from(declared, record["outputs"], where)


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _read(hint: Any, value: Any, where: str) -> Any:
    """A field's value: a dict read as the dataclass its hint names (alone or `X | None`)."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    options = typing.get_args(hint) if union else (hint,)
    nested = [t for t in options if isinstance(t, type) and is_dataclass(t)]
    if nested and isinstance(value, dict):
        return outputs_from(nested[0], value, where)
    return value


def by_multiple(values: dict[str, float]) -> list[tuple[str, float]]:
    """Items keyed by a length multiple, in numeric order (done.json sorts keys as text): the
    evals' columns of the results table."""
    return sorted(values.items(), key=lambda item: float(item[0]))
