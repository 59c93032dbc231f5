"""The schema's checks in one line each: the ranges and choices of `rule(...)` fields
(check_rules), and Hydra's or OmegaConf's multi-line composition errors turned into one line
naming the key, what was found and what is allowed (one_line)."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import operator
import re
import types
import typing
from typing import Any

from omegaconf import DictConfig, ListConfig
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from ssmax.config.schema_pipeline import MOVED_KEYS, PipelineConfig

TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


class RuleError(ValueError):
    """A value outside its field's rule (ssmax.preflight.settings turns it into a ConfigError)."""


@functools.cache  # a schema class's hints never change; check_rules asks per field
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _unwrap(tp: Any) -> tuple[Any, ...]:
    """The members of a union (X | None -> (X, NoneType)), else (tp,)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return (tp,)


def _field(key: str) -> tuple[dataclasses.Field[Any], Any] | None:
    """The schema field of a dotted key and its type, or None (an open block, a list item)."""
    cls: Any = PipelineConfig
    found = None
    for part in key.split("."):
        if not dataclasses.is_dataclass(cls):
            return None
        match = {f.name: f for f in dataclasses.fields(cls)}.get(part)
        if match is None:
            return None
        tp = _hints(cls)[part]
        found = (match, tp)
        cls = next((t for t in _unwrap(tp) if dataclasses.is_dataclass(t)), None)
    return found


def describe(key: str) -> str:
    """What a key allows, e.g. 'a number > 0', "one of ('constant', 'cosine')"."""
    base, item = re.subn(r"\[\d+\]$", "", key)
    found = _field(base)
    if found is None:
        return "see src/ssmax/config/schema.py"
    field, tp = found
    if item:  # an element of a list field: its element type
        lists = [t for t in _unwrap(tp) if typing.get_origin(t) is list]
        element = typing.get_args(lists[0])[0] if lists else Any
        return TYPE_NAMES.get(element, "any value") + f" (an item of {base})"
    rules = field.metadata
    if "choices" in rules:
        return f"one of {tuple(rules['choices'])}"
    kinds = [t for t in _unwrap(tp) if t is not type(None)]
    names = [TYPE_NAMES.get(t, getattr(t, "__name__", str(t))) for t in kinds]
    if len(kinds) == 2 and set(kinds) == {int, float}:
        names = ["a number"]
    text = " or ".join(dict.fromkeys(names))
    if typing.get_origin(tp) is list or any(typing.get_origin(t) is list for t in kinds):
        text = "a list, e.g. [1, 2]"
    bounds = [f"{op} {rules[name]}" for name, op, _ in BOUNDS if name in rules]
    if bounds:
        text += " " + " and ".join(bounds)
    if type(None) in _unwrap(tp):
        text += ", or null"
    return text


def check_rules(cfg: DictConfig, cls: Any = PipelineConfig, prefix: str = "") -> None:
    """Raise RuleError on the first key the schema lacks (a `+key=` override adds keys past
    Hydra's struct check) or value outside its field's gt/ge/choices, or a list item given
    twice where the field is unique."""
    names = [f.name for f in dataclasses.fields(cls)]
    for key in cfg:
        if key not in names:
            near = difflib.get_close_matches(str(key), names, n=3, cutoff=0.6)
            hint = f"nearest: {', '.join(near)}" if near else f"allowed: {', '.join(names)}"
            raise RuleError(f"{prefix}{key} is not a config key; {hint}")
    for field in dataclasses.fields(cls):
        if field.name not in cfg:
            continue
        key, value = f"{prefix}{field.name}", cfg[field.name]
        if value is None:
            continue
        kinds = _unwrap(_hints(cls)[field.name])
        sub = next((t for t in kinds if dataclasses.is_dataclass(t)), None)
        if sub is not None:
            check_rules(value, sub, f"{key}.")
            continue
        rules = field.metadata
        if isinstance(value, ListConfig | list):  # a list: its length, then each item
            _check_length(key, list(value), rules)
            for i, item in enumerate(value):
                _check_value(f"{key}[{i}]", item, rules)
        else:
            _check_value(key, value, rules)


BOUNDS = (("gt", ">", operator.gt), ("ge", ">=", operator.ge), ("lt", "<", operator.lt),
          ("le", "<=", operator.le))  # fmt: skip


def _check_value(key: str, value: Any, rules: dict[str, Any]) -> None:
    if rules.get("auto") and isinstance(value, str):  # "auto", else a number within the bounds
        if value == "auto":
            return
        bounds = " and ".join(f"{op} {rules[n]}" for n, op, _ in BOUNDS if n in rules)
        raise RuleError(f"{key}={value!r}; allowed: 'auto' or a number {bounds}")
    if "choices" in rules and value not in rules["choices"]:
        raise RuleError(f"{key}={value!r}; allowed: {tuple(rules['choices'])}")
    for name, op, holds in BOUNDS:
        if name not in rules:
            continue
        try:
            ok = holds(value, rules[name])
        except TypeError:  # a value of Any type (an item of an open list) that is no number
            raise RuleError(f"{key}={value!r} has the wrong type; allowed: a number") from None
        if not ok:
            raise RuleError(f"{key}={value} must be {op} {rules[name]}")


def _check_length(key: str, value: list[Any], rules: dict[str, Any]) -> None:
    if "length" in rules and len(value) != rules["length"]:
        raise RuleError(f"{key}={value} must have {rules['length']} items")
    if "min_items" in rules and len(value) < rules["min_items"]:
        raise RuleError(f"{key}={value} must have at least {rules['min_items']} item(s)")
    if rules.get("unique"):
        seen: list[Any] = []
        for item in value:
            if item in seen:  # ==, not hash: 2 and 2.0 are one context multiple
                raise RuleError(f"{key}={value} has {item!r} twice; allowed: each item once")
            seen.append(item)


def _omegaconf_error(err: BaseException | None) -> OmegaConfBaseException | None:
    seen = 0
    while err is not None and seen < 10:
        if isinstance(err, OmegaConfBaseException) and getattr(err, "full_key", None):
            return err
        err, seen = err.__cause__ or err.__context__, seen + 1
    return None


def moved(key: str, value: str | None = None) -> str:
    """The line for a key that moved (MOVED_KEYS), with the setting to write instead."""
    now = MOVED_KEYS[key]
    setting = now if value is None else f"{now}={value}"
    return f"{key} is now {now} (the protocol's settings moved out of pipeline); set {setting}"


def one_line(err: BaseException) -> str | None:
    """A composition error as one line, or None when it is not a schema error."""
    cause = _omegaconf_error(err)
    if cause is None:
        return None
    key = str(cause.full_key)
    if isinstance(cause, ConfigKeyError):
        if key in MOVED_KEYS:  # a file of an earlier release's keys
            return moved(key)
        parent = key.rpartition(".")[0]
        found = _field(parent) if parent else None
        cls = next((t for t in _unwrap(found[1]) if dataclasses.is_dataclass(t)), None) if found \
            else PipelineConfig  # fmt: skip
        names = ", ".join(f.name for f in dataclasses.fields(cls)) if cls else "?"
        return f"{key} is not a config key; keys under {parent or 'the root'}: {names}"
    if isinstance(cause, ValidationError):
        if "is not Optional" in str(cause.msg):
            return f"{key} is missing (null); allowed: {describe(key)}"
        value = re.search(r"Value '(.*?)' of type", str(cause.msg))
        found = repr(value.group(1)) if value else "this value"
        return f"{key}={found} has the wrong type; allowed: {describe(key)}"
    return None
