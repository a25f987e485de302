"""The alert rule is declared once (replayscope.collector.alert_rule): every field of the API's
documented schema, the store's column and the check every write goes through agree on
bounds, lengths, defaults and nullability. Read through the interfaces each side exposes
(the OpenAPI component, the table, ``validate_rule``, the Alerts page's form), so the test
judges what users meet, not the declaration itself."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from replayscope.collector.alerting import alerts
from replayscope.collector.schemas import AlertRuleIn
from replayscope.collector.tables import alert_rules

SCHEMA = AlertRuleIn.model_json_schema()
PROPERTIES = SCHEMA["properties"]
REQUIRED = set(SCHEMA.get("required", []))
BASE = {"name": "x", "threshold": 1.0}          # any resolve_threshold 0..1 is at or below it
# The kind whose field it is, where a field belongs to one kind.
KIND_OF = {"metric": "regression"}


def _branches(prop: dict) -> list[dict]:
    return prop.get("anyOf", [prop])


def _typed(prop: dict) -> dict:
    return next(b for b in _branches(prop) if b.get("type") != "null")


def _nullable(prop: dict) -> bool:
    return any(b.get("type") == "null" for b in _branches(prop))


def _check(name: str, value):
    """What the writes' validation makes of ``value`` in field ``name`` (a full rule around it)."""
    rule = {**BASE, name: value}
    if name in KIND_OF:
        rule["kind"] = KIND_OF[name]
    return alerts.validate_rule(rule)[name]


def _rejects(name: str, value) -> bool:
    try:
        _check(name, value)
    except alerts.InvalidRule as error:
        assert error.field == name
        return True
    return False


@pytest.mark.parametrize("name", list(PROPERTIES))
def test_every_field_agrees_across_the_api_schema_the_table_and_the_check(name):
    prop, column = PROPERTIES[name], alert_rules.c[name]
    typed = _typed(prop)
    # nullability: the schema, the column and the check say the same
    assert _nullable(prop) == column.nullable == (not _rejects(name, None))
    # required or defaulted: what the schema documents is what a rule gets
    defaults = alerts.validate_rule({**BASE, **({"kind": KIND_OF[name]} if name in KIND_OF else {})})
    if name in REQUIRED:
        assert "default" not in prop
        with pytest.raises(alerts.InvalidRule):
            alerts.validate_rule({k: v for k, v in BASE.items() if k != name})
    else:
        assert defaults[name] == prop["default"]
    # numeric bounds: the schema's are the check's, exactly
    if "minimum" in typed:
        low, high = typed["minimum"], typed["maximum"]
        assert _check(name, low) == low and _check(name, high) == high
        step = 1 if typed["type"] == "integer" else 1e-9
        assert _rejects(name, low - step) and _rejects(name, high + step)
        if typed["type"] == "integer":
            assert isinstance(column.type, sa.Integer) and _rejects(name, low + 0.5)
            assert high <= 2**31 - 1                        # fits the INTEGER column
        else:
            assert isinstance(column.type, sa.Float)
    # lengths: the schema's maxLength is the column's and the check's
    if isinstance(column.type, sa.String):
        length = column.type.length
        if "enum" in typed:
            assert max(len(v) for v in typed["enum"]) <= length
            for value in typed["enum"]:
                assert _check(name, value) == value
            assert _rejects(name, "not-" + typed["enum"][0])
        else:                       # free text: documented as long as the column, no longer
            assert typed["maxLength"] == length
            assert _rejects(name, "a" * (length + 1))
    if typed.get("type") == "boolean":
        assert isinstance(column.type, sa.Boolean)
        assert _check(name, False) is False and _rejects(name, 1)


def test_the_schema_and_the_table_have_the_same_fields_and_the_check_knows_no_other():
    stored = {c.name for c in alert_rules.c} - {"id", "created_at", "updated_at"}
    assert set(PROPERTIES) == stored
    with pytest.raises(alerts.InvalidRule) as info:
        alerts.validate_rule({**BASE, "colour": "red"})
    assert info.value.field == "colour"


def test_the_schema_documents_the_names_the_check_takes():
    pattern = _typed(PROPERTIES["name"])["pattern"]
    import re
    for name in ("eager-high", "a", "decode 1:2.x_y", "x" * 100):
        assert re.match(pattern, name) and _check("name", name) == name
    for name in ("-x", " x", "x" * 101, "x/y", ""):
        assert not re.match(pattern, name) and _rejects("name", name)


def test_the_kinds_are_the_ones_the_rule_declares():
    from replayscope.collector.alert_rule import RULE_KINDS
    from replayscope.collector.alerting.kinds import KINDS
    assert tuple(KINDS) == RULE_KINDS == tuple(_typed(PROPERTIES["kind"])["enum"])



def test_a_rules_webhook_url_fits_what_any_receiver_url_may_be():
    from replayscope.collector.alerting.webhook_urls import MAX_URL_CHARS
    assert alert_rules.c["webhook_url"].type.length == MAX_URL_CHARS
