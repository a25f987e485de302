"""Checking a run record, an event or a run's config against the wire contract
(``replayscope.contract.wire.schema``): ``validate_run``, ``validate_event`` (a compiled fast path per
event kind, then the full check with the error that names the field), ``check_config``;
and ``readable_config``, a config as a page may show it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from replayscope.contract.wire.schema import (COMMON_EVENT_FIELDS, CONFIG_FIELDS, CUSTOM_REASON_PREFIX,
                                              EVENT_FIELDS, EVENT_KINDS, FieldSpec, ListOf, MAX_BATCH,
                                              MAX_BATCH_SIZES, MAX_SEQ, MAX_TIMESTAMP, REASONS, RUN_FIELDS,
                                              WireError, _BATCH_PART_FIELDS, _FLOAT_MAX, is_valid_reason)


def _check_value(name: str, spec: FieldSpec, value: Any) -> None:
    if value is None:
        if not spec.nullable:
            raise WireError(name, "must not be null")
        return
    if spec.type in ("str", "reason"):
        if not isinstance(value, str):
            raise WireError(name, "must be a string")
        if len(value) > spec.max_chars:
            raise WireError(name, f"longer than {spec.max_chars} characters")
        if "\x00" in value:
            raise WireError(name, "must not contain a NUL character (U+0000)")
        if spec.type == "reason" and not is_valid_reason(value):
            raise WireError(name, f"{value!r} is not a known reason ({', '.join(REASONS)}) "
                                  f"nor '{CUSTOM_REASON_PREFIX}<text>'")
        if spec.choices is not None and value not in spec.choices:
            raise WireError(name, f"{value!r} is not one of {', '.join(spec.choices)}")
        if spec.pattern is not None and not spec.pattern.match(value):
            raise WireError(name, f"{value!r} does not match {spec.pattern.pattern}")
        return
    if spec.type == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise WireError(name, "must be an integer")
        if abs(value) > MAX_SEQ:
            raise WireError(name, "out of range")
    elif spec.type == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise WireError(name, "must be a number")
        if isinstance(value, float) and not math.isfinite(value):
            raise WireError(name, "must be finite")
        if abs(value) > _FLOAT_MAX:
            raise WireError(name, "out of range")
    elif spec.type == "bool":
        if not isinstance(value, bool):
            raise WireError(name, "must be true or false")
        return
    elif spec.type == "object":
        if not isinstance(value, dict):
            raise WireError(name, "must be an object")
        return
    if spec.minimum is not None and value < spec.minimum:
        raise WireError(name, f"must be >= {spec.minimum:g}")
    if spec.maximum is not None and value > spec.maximum:
        if spec.timestamp:
            raise WireError(name, _timestamp_too_large(value))
        raise WireError(name, f"must be <= {spec.maximum:g}")


def _timestamp_too_large(value: float) -> str:
    """Name the unit a too-large timestamp was most likely sent in."""
    for unit, divisor in (("milliseconds", "1000"), ("microseconds", "1e6"), ("nanoseconds", "1e9")):
        if value <= MAX_TIMESTAMP * float(divisor):
            return (f"{value:.17g} is after 2100-01-01: it looks like {unit} since the epoch; "
                    f"send unix seconds (divide by {divisor})")
    return f"{value:.6g} is after 2100-01-01: not a time in unix seconds"


def _check_fields(record: Any, specs: dict[str, FieldSpec]) -> None:
    if not isinstance(record, dict):
        raise WireError("(record)", "must be a JSON object")
    for name, spec in specs.items():
        if name not in record:
            if spec.required:
                raise WireError(name, "is required")
            continue
        _check_value(name, spec, record[name])


def check_run_field(name: str, value: Any) -> None:
    """Raise WireError unless ``value`` may be the run record's field ``name`` (a command's
    flag checked before its run starts, e.g. ``run --run-id``)."""
    _check_value(name, RUN_FIELDS[name], value)


def validate_run(record: Any) -> None:
    """Raise WireError unless ``record`` is a valid run record (its ``config`` included)."""
    _check_fields(record, RUN_FIELDS)
    if record.get("config") is not None:
        check_config(record["config"])


def _check_shape(name: str, spec: Any, value: Any) -> None:
    if isinstance(spec, FieldSpec):
        _check_value(name, spec, value)
    elif isinstance(spec, dict):
        if not isinstance(value, dict):
            raise WireError(name, "must be an object")
        for key, field_spec in spec.items():
            if key in value:
                _check_value(f"{name}.{key}", field_spec, value[key])
    elif value is not None:
        container = list if isinstance(spec, ListOf) else dict
        if not isinstance(value, (list, tuple) if container is list else dict):   # a tuple is a JSON array too
            raise WireError(name, "must be an array" if container is list else "must be an object")
        if len(value) > spec.max_items:
            raise WireError(name, f"more than {spec.max_items} items")
        items = enumerate(value) if container is list else value.items()
        inner = spec.item if container is list else spec.value
        for key, item in items:
            _check_shape(f"{name}[{key}]" if container is list else f"{name}.{key}", inner, item)


def check_config(config: Any) -> None:
    """Raise WireError unless every key of a run's config that replayscope reads has its shape."""
    if not isinstance(config, dict):
        raise WireError("config", "must be an object")
    for key, spec in CONFIG_FIELDS.items():
        if key in config:
            _check_shape(f"config.{key}", spec, config[key])
    _check_finite("config", config)


def _check_finite(name: str, value: Any) -> None:
    """JSON has no NaN or Infinity (a lenient parser may still produce them): none may be stored."""
    if isinstance(value, float) and not math.isfinite(value):
        raise WireError(name, "must be a finite number (JSON has no NaN or Infinity)")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_finite(f"{name}.{key}", item)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_finite(f"{name}[{i}]", item)


def readable_config(config: Any) -> dict[str, Any]:
    """A stored config as readers may use it: a key that breaks its shape (stored before it
    was checked at ingest) reads as absent."""
    if not isinstance(config, dict):
        return {}
    out = dict(config)
    for key, spec in CONFIG_FIELDS.items():
        if key in out:
            try:
                _check_shape(f"config.{key}", spec, out[key])
            except WireError:
                del out[key]
    return out


def validate_event(event: Any) -> None:
    """Raise WireError unless ``event`` is a valid event; checks cross-field rules too."""
    kind = event.get("kind") if type(event) is dict else None
    fast = _FAST_CHECKS.get(kind) if type(kind) is str else None
    if fast is None or not fast(event):
        # The precise checks, which name the field that is wrong.
        _check_fields(event, COMMON_EVENT_FIELDS)
        kind = event["kind"]
        _check_fields(event, EVENT_FIELDS[kind])
    if kind == "step":
        _check_step_modes(event)
    elif kind == "step_counts":
        if event["mode"] == "eager" and event.get("reason") is None:
            raise WireError("reason", "an eager step needs a reason")
        if event["mode"] != "eager" and event.get("reason") is not None:
            raise WireError("reason", "only eager steps carry a reason")
        if event["mode"] == "eager" and event.get("graph_bs") is not None:
            raise WireError("graph_bs", "must be null for eager steps")
        if event.get("batch_sizes") is not None:
            if event.get("raw_bs") is not None:
                raise WireError("batch_sizes", "give raw_bs (one size) or batch_sizes (several), not both")
            _check_batch_sizes(event)


_BATCH_SIZE_KEY = re.compile(r"^[1-9][0-9]{0,6}\Z")      # ASCII digits: "²".isdigit() is true too


def _check_batch_sizes(event: dict[str, Any]) -> None:
    """``batch_sizes`` splits the event's totals by raw batch size; the parts must add up."""
    parts = event["batch_sizes"]
    if not parts or len(parts) > MAX_BATCH_SIZES:
        raise WireError("batch_sizes", f"1-{MAX_BATCH_SIZES} batch sizes")
    sums = {"count": 0, "num_tokens": 0, "padded_tokens": 0}
    timed = event.get("duration_s") is not None
    for key, part in parts.items():
        if not (_BATCH_SIZE_KEY.match(key) and int(key) <= MAX_BATCH):
            raise WireError("batch_sizes", f"{key!r} is not a batch size (a positive integer as a string)")
        try:
            _check_fields(part, _BATCH_PART_FIELDS)
        except WireError as error:
            raise WireError(f"batch_sizes.{key}.{error.field}", error.message) from None
        if (part.get("duration_s") is not None) != timed:
            raise WireError(f"batch_sizes.{key}.duration_s", "given exactly when the event's duration_s is")
        for name in sums:
            sums[name] += part[name]
    for name, total in sums.items():
        if total != event[name]:
            raise WireError("batch_sizes", f"the parts' {name} add up to {total}, not {event[name]}")


def _check_step_modes(event: dict[str, Any]) -> None:
    mode, raw_bs, graph_bs = event["mode"], event["raw_bs"], event["graph_bs"]
    if mode == "eager":
        if graph_bs is not None:
            raise WireError("graph_bs", "must be null for an eager step")
        if event["reason"] is None:
            raise WireError("reason", "an eager step needs a reason")
        return
    if event["reason"] is not None:
        raise WireError("reason", "only eager steps carry a reason")
    if graph_bs is None:
        raise WireError("graph_bs", f"is required for a {mode} step")
    if mode == "graph" and graph_bs != raw_bs:
        raise WireError("graph_bs", "a graph step replays a graph of exactly raw_bs")
    if mode == "padded" and graph_bs <= raw_bs:
        raise WireError("graph_bs", "a padded step replays a graph larger than raw_bs")


_MISSING = object()


def _fast_expression(name: str, spec: FieldSpec, env: dict[str, Any]) -> str:
    if spec.type in ("str", "reason"):
        if spec.choices is not None:
            env[f"choices_{name}"] = spec.choices
            base = f"v in choices_{name}"
        elif spec.type == "reason":
            env["REASONS"], env["is_valid_reason"] = REASONS, is_valid_reason
            base = "(v in REASONS or (type(v) is str and is_valid_reason(v)))"
        else:
            base = f"(type(v) is str and len(v) <= {spec.max_chars} and '\\x00' not in v)"
            if spec.pattern is not None:
                env[f"pattern_{name}"] = spec.pattern
                base = f"({base} and pattern_{name}.match(v) is not None)"
    elif spec.type == "int":
        low = -MAX_SEQ if spec.minimum is None else int(spec.minimum)
        high = MAX_SEQ if spec.maximum is None else int(spec.maximum)
        base = f"(type(v) is int and {low} <= v <= {high})"
    elif spec.type == "float":
        low = -_FLOAT_MAX if spec.minimum is None else spec.minimum
        high = _FLOAT_MAX if spec.maximum is None else spec.maximum
        base = f"((type(v) is float and v - v == 0.0 or type(v) is int) and {low!r} <= v <= {high!r})"
    elif spec.type == "object":
        base = "type(v) is dict"
    else:
        base = "type(v) is bool"
    return f"v is None or {base}" if spec.nullable else base


def _compile_fast_check(kind: str) -> Any:
    env: dict[str, Any] = {"M": _MISSING}
    lines = [f"def fast_{kind}(e):"]
    for name, spec in {**COMMON_EVENT_FIELDS, **EVENT_FIELDS[kind]}.items():
        check = _fast_expression(name, spec, env) if name != "kind" else f"v == {kind!r}"
        lines.append(f"    v = e.get({name!r}, M)")
        if spec.required:
            lines.append(f"    if v is M or not ({check}): return False")
        else:
            lines.append(f"    if v is not M and not ({check}): return False")
    lines.append("    return True")
    exec("\n".join(lines), env)
    return env[f"fast_{kind}"]


_FAST_CHECKS = {kind: _compile_fast_check(kind) for kind in EVENT_KINDS}
