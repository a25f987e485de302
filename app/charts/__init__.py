"""Figure builders: plain dicts shaped like the query layer's results in, plotly figures out.

Pure functions, no store access, so the pages, the tests and the benchmark build the
same figures from the same rows. One module per page's kind of chart (``run``, ``startup``,
``fleet``) over what they share (``base``); the package's names are the ones the pages use
(``charts.pool_figure``).
"""

from replayscope.app.charts.base import MODE_COLORS, MODE_ORDER, capture_size, per_bucket, size_title, time_axis
from replayscope.app.charts.fleet import FLEET_METRICS, fleet_figure
from replayscope.app.charts.run import (advisor_histogram_figure, batch_histogram_figure, eager_ratio_figure,
                                        mode_mix_figure, padding_by_size, padding_figure, parity_figure,
                                        rule_ratio_figure, step_time_figure)
from replayscope.app.charts.startup import (capture_figure, diff_figure, pool_figure, startup_diff,
                                            waterfall_figure, waterfall_rows)

__all__ = [
    "MODE_COLORS", "MODE_ORDER", "capture_size", "per_bucket", "size_title", "time_axis",
    "FLEET_METRICS", "fleet_figure",
    "advisor_histogram_figure", "batch_histogram_figure", "eager_ratio_figure", "mode_mix_figure",
    "padding_by_size", "padding_figure", "parity_figure", "rule_ratio_figure", "step_time_figure",
    "capture_figure", "diff_figure", "pool_figure", "startup_diff", "waterfall_figure", "waterfall_rows",
]
