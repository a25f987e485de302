"""The API's models: what every route accepts and returns (each response validated against
its model, undeclared keys refused). One module per resource, as the routers are; this
package's names are the ones the routers use (``schemas.RunSummary``)."""

from replayscope.collector.schemas.alerts import (AlertEvent, AlertRule, AlertRuleIn, AlertRulePatch,
                                                  Notification)
from replayscope.collector.schemas.analysis import (Advice, Diagnosis, Evidence, Finding, PlanOut,
                                                    PlanScoreOut, PriceOut)
from replayscope.collector.schemas.base import ModeCounts, Number, Out, add_component_schemas, request_body
from replayscope.collector.schemas.events import (EVENT_MODELS, CaptureRow, DegradeRow, Event, EventBatch,
                                                  IngestResponse, ParityRow, PhaseRow, RecordingRow,
                                                  RunCreated, RunRecord, WarningRow)
from replayscope.collector.schemas.fleet import (Baseline, Fleet, FleetFigures, FleetGroup, FleetPoint,
                                                 FleetRun, RegressionFinding, RunFigures, RunRegressions)
from replayscope.collector.schemas.ops import Health, Problem, ServiceState
from replayscope.collector.schemas.runs import (BatchRow, LogSample, ReasonRow, RunListItem, RunSummary,
                                                StepDetail, StepTimeRow, TimelinePoint)

__all__ = [
    "AlertEvent", "AlertRule", "AlertRuleIn", "AlertRulePatch", "Notification",
    "Advice", "Diagnosis", "Evidence", "Finding", "PlanOut", "PlanScoreOut", "PriceOut",
    "ModeCounts", "Number", "Out", "add_component_schemas", "request_body",
    "EVENT_MODELS", "CaptureRow", "DegradeRow", "Event", "EventBatch", "IngestResponse", "ParityRow", "PhaseRow",
    "RecordingRow", "RunCreated", "RunRecord", "WarningRow",
    "Baseline", "Fleet", "FleetFigures", "FleetGroup", "FleetPoint", "FleetRun", "RegressionFinding",
    "RunFigures", "RunRegressions",
    "Health", "Problem", "ServiceState",
    "BatchRow", "LogSample", "ReasonRow", "RunListItem", "RunSummary", "StepDetail", "StepTimeRow",
    "TimelinePoint",
]
