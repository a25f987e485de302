"""Wire contract v1: replayscope's run record and events, in two modules —
``replayscope.contract.wire.schema`` (the vocabulary and every field) and ``replayscope.contract.wire.checks`` (checking
a record, an event or a config against it). Every name is importable from here:
``from replayscope.contract.wire import validate_event, REASONS``.
"""

from __future__ import annotations

from replayscope.contract.wire.checks import (check_config, check_run_field, readable_config, validate_event,
                                              validate_run)
from replayscope.contract.wire.schema import (CAPTURE_STAGES, CAPTURE_STATUSES, RUNNER_CAPTURE_STAGES,
                                              COMMON_EVENT_FIELDS, CONFIG_FIELDS, CUSTOM_REASON_MAX_CHARS,
                                              CUSTOM_REASON_PREFIX, DECODE_STAGES, DECODE_VIEW, EVENT_FIELDS,
                                              EVENT_KINDS, FieldSpec, ListOf, MAX_BATCH, MAX_BATCH_SIZES,
                                              MAX_BYTES, MAX_COUNT, MAX_DURATION_S, MAX_SEQ, MAX_STEP_TOKENS,
                                              MAX_TIMESTAMP, MODE_UNKNOWN, MODES, MapOf, NOT_MEASURABLE,
                                              PROVENANCES, REASONS, RECORDING_CAUSES, RULE_STAGES,
                                              RUN_END_STATUSES, RUN_FIELDS, RUN_STATUSES,
                                              SIZE_DECIDED_REASONS, SOURCES, STEP_COUNT_MODES, STEP_STAGES,
                                              WIRE_VERSION, WireError, custom_reason, default_provenance,
                                              is_valid_reason, reason_label, stages_of)

__all__ = ["CAPTURE_STAGES", "CAPTURE_STATUSES", "COMMON_EVENT_FIELDS", "CONFIG_FIELDS", "CUSTOM_REASON_MAX_CHARS",
           "CUSTOM_REASON_PREFIX", "DECODE_STAGES", "DECODE_VIEW", "EVENT_FIELDS", "EVENT_KINDS",
           "FieldSpec", "ListOf", "MAX_BATCH", "MAX_BATCH_SIZES", "MAX_BYTES", "MAX_COUNT",
           "MAX_DURATION_S", "MAX_SEQ", "MAX_STEP_TOKENS", "MAX_TIMESTAMP", "MODE_UNKNOWN", "MODES",
           "MapOf", "NOT_MEASURABLE", "PROVENANCES", "REASONS", "RECORDING_CAUSES", "RULE_STAGES",
           "RUNNER_CAPTURE_STAGES", "RUN_END_STATUSES", "RUN_FIELDS", "RUN_STATUSES", "SIZE_DECIDED_REASONS", "SOURCES",
           "STEP_COUNT_MODES", "STEP_STAGES", "WIRE_VERSION", "WireError", "check_config", "check_run_field", "custom_reason",
           "default_provenance", "is_valid_reason", "readable_config", "reason_label", "stages_of",
           "validate_event", "validate_run"]
