"""A run against its baseline, and the fleet: runs judged, grouped and over time."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from replayscope.collector.analysis.regressions import METRICS as REGRESSION_METRICS
from replayscope.collector.schemas.base import ModeCounts, Number, Out
from replayscope.contract import wire

class RegressionFinding(Out):
    metric: Literal[tuple(REGRESSION_METRICS)]  # type: ignore[valid-type]
    label: str
    unit: str = Field(description="ratio | seconds | bytes")
    direction: Literal["worse", "better"]
    value: Number
    median: Number
    low: Number
    high: Number
    margin: Number
    change: Optional[float] = Field(description="share points for eager share, else relative to the median "
                                                "(null at a median of 0)")


class Baseline(Out):
    """The earlier finished runs of the same model and configuration a run is compared with."""

    runs: list[str]
    names: list[str]
    n: int
    first_started_at: float
    last_started_at: float
    versions: list[str]
    config_key: Optional[str]
    text: str


class RunRegressions(Out):
    baseline: Optional[Baseline] = Field(description="null: no earlier finished run of its configuration")
    regressions: list[RegressionFinding]
    improvements: list[RegressionFinding]
    judged: bool = Field(description="false with too few baseline runs to judge")
    figures: dict[str, Optional[Number]] = Field(description="the run's value per metric")
    version: Optional[str] = Field(description="the run's version (an engine log's release, e.g. 'vllm 0.13.0'); "
                                               "null: not recorded")
    version_change: Optional[str] = Field(description="'<baseline versions> → <this version>' when they differ "
                                                      "(an upgrade), else null")


class RunFigures(Out):
    """A run's headline figures (``replayscope.collector.analysis.fleet``): null when unknown."""

    eager_ratio: Optional[float] = Field(description="eager / all steps of the decode stages (decode and mixed; "
                                                     "prefill always runs eager); null without decode steps")
    decode_padded_ratio: Optional[float]
    step_s: dict[str, Optional[float]] = Field(description="mean step time per mode, decode stages")
    graph_step_s: Optional[float]
    padded_step_s: Optional[float]
    eager_step_s: Optional[float]
    capture_total_s: Optional[float]
    startup_s: Optional[float]
    pool_bytes: Optional[int]


class FleetFigures(RunFigures):
    """Figures of a set of runs: shares weighted by steps and tokens, step times by timed
    steps, capture and startup as medians, pool memory as the largest."""

    runs: int
    steps: int
    regressions: int = Field(description="runs with a regression")


class FleetGroup(FleetFigures):
    model: str
    backend: str
    device: str
    version: Optional[str]
    latest_run_id: str
    latest_name: str
    first_started_at: float
    last_started_at: float


class FleetPoint(FleetFigures):
    group: str
    model: str
    backend: str
    device: str
    version: Optional[str]
    t: float = Field(description="bucket start (of the runs' start), unix s")
    bucket_s: int


class FleetRun(RunFigures):
    run_id: str
    name: str
    source: str
    model: str
    backend: str
    device: str
    version: Optional[str] = Field(description="the run record's, else 'torch <version>', else null")
    config_key: Optional[str]
    status: Literal[wire.RUN_STATUSES]  # type: ignore[valid-type]
    started_at: float
    ended_at: Optional[float]
    graph_sample: Optional[int]
    raw_expired_before: Optional[float]
    seconds_expired_before: Optional[float]
    steps: int
    modes: ModeCounts
    decode_num_tokens: int
    decode_padded_tokens: int
    decode_steps: int
    decode_eager_steps: int
    regressions: list[RegressionFinding]
    improvements: list[RegressionFinding]
    baseline_runs: int
    baseline: Optional[Baseline] = Field(description="named only for a run with findings")


class Fleet(Out):
    groups: list[FleetGroup]
    runs: list[FleetRun] = Field(description="the newest runs, newest first, at most limit")
    runs_total: int
    series: list[FleetPoint]
