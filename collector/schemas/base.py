"""What every API model shares: ``Out`` (a response body that declares every key), the
fields generated from ``replayscope.contract.wire``'s field tables, and the OpenAPI helpers for bodies a
route parses itself."""

from __future__ import annotations

import keyword
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from replayscope.contract import wire
from replayscope.contract.wire import FieldSpec

_REASON_DOC = ("one of " + ", ".join(wire.REASONS) + f", or '{wire.CUSTOM_REASON_PREFIX}<text>' "
               f"(1-{wire.CUSTOM_REASON_MAX_CHARS} printable characters)")


class Out(BaseModel):
    """A response body: every key it has is declared (an undeclared one fails the response,
    so a test finds it, rather than FastAPI dropping it on the way out)."""

    model_config = ConfigDict(extra="forbid")


def _annotation(spec: FieldSpec) -> Any:
    if spec.choices:
        base: Any = Literal[spec.choices]  # type: ignore[valid-type]
    else:
        base = {"str": str, "reason": str, "int": int, "float": float, "bool": bool,
                "object": dict[str, Any]}[spec.type]
    return Optional[base] if spec.nullable or not spec.required else base


def wire_field(name: str, spec: FieldSpec, *, all_optional: bool = False) -> tuple[str, tuple[Any, Any]]:
    kw: dict[str, Any] = {"description": (spec.doc or None) if spec.type != "reason" else
                          ((spec.doc + "; ") if spec.doc else "") + _REASON_DOC}
    if spec.minimum is not None and spec.type in ("int", "float"):
        kw["ge"] = spec.minimum
    if spec.maximum is not None and spec.type in ("int", "float"):
        kw["le"] = spec.maximum
    if spec.type in ("str", "reason") and not spec.choices:
        kw["max_length"] = spec.max_chars
        if spec.pattern is not None:
            kw["pattern"] = spec.pattern.pattern
    py_name = name
    if keyword.iskeyword(name):
        py_name, kw["alias"] = name + "_", name
    required = spec.required and not all_optional
    annotation = _annotation(spec) if not all_optional else Optional[_annotation(spec)]
    return py_name, (annotation, Field(... if required else None, **kw))


# A figure that is a count of bytes or a share: kept an integer when it is one.
Number = Union[int, float]


class ModeCounts(Out):
    graph: int
    padded: int
    eager: int
    unknown: int = Field(0, description="steps the source counted without saying how they ran (a scrape of "
                                        "vLLM's /metrics)")


def request_body(model: type[BaseModel]) -> dict:
    """``openapi_extra`` documenting a body that the route parses itself."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


def add_component_schemas(openapi: dict, models: list[type[BaseModel]]) -> dict:
    schemas = openapi.setdefault("components", {}).setdefault("schemas", {})
    for model in models:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in schema.pop("$defs", {}).items():
            schemas.setdefault(name, sub)
        schemas[model.__name__] = schema
    return openapi
