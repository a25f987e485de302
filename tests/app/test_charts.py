"""Figures: rounded units, unknown values drawn as gaps (never zeros)."""

from replayscope.app import charts
from replayscope.collector.analysis.reasons import size_namer

RUNNER_SIZES = size_namer("runner")        # the runner's sizes: batch sizes


def _capture(bs, duration_s=0.05, pool_bytes=None, pool_delta_bytes=None, status="ok"):
    return {"graph_bs": bs, "stage": "decode", "duration_s": duration_s, "pool_bytes": pool_bytes,
            "pool_delta_bytes": pool_delta_bytes, "status": status, "ts": 10.0, "start_ts": None}


def test_the_pool_axis_is_in_a_readable_unit_with_rounded_hover_text():
    fig = charts.pool_figure([_capture(8, pool_bytes=53_687_092, pool_delta_bytes=53_687_092),
                              _capture(4, pool_bytes=53_687_092 + 2**20, pool_delta_bytes=2**20)],
                             size_name=RUNNER_SIZES).to_plotly_json()
    assert fig["layout"]["yaxis"]["title"]["text"] == "MiB"
    assert fig["layout"]["yaxis"]["rangemode"] == "tozero"        # no axis zoomed onto 51.2000007
    delta, pool = fig["data"]
    assert list(delta["customdata"]) == ["51.2 MiB", "1.00 MiB"]
    assert list(pool["customdata"]) == ["51.2 MiB", "52.2 MiB"]
    assert "%{customdata}" in delta["hovertemplate"]


def test_the_pool_axis_unit_follows_the_largest_value():
    fig = charts.pool_figure([_capture(8, pool_bytes=3 * 2**30, pool_delta_bytes=3 * 2**30)],
                             size_name=RUNNER_SIZES).to_plotly_json()
    assert fig["layout"]["yaxis"]["title"]["text"] == "GiB"
    assert list(fig["data"][0]["y"]) == [3.0]


def test_an_unknown_pool_delta_is_a_gap_not_a_zero():
    fig = charts.pool_figure([_capture(8, pool_bytes=2**20, pool_delta_bytes=None)],
                             size_name=RUNNER_SIZES).to_plotly_json()
    delta = fig["data"][0]
    assert list(delta["y"]) == [None]
    assert list(delta["customdata"]) == ["not measured"]


def test_an_unknown_capture_time_is_a_gap_that_says_why():
    fig = charts.capture_figure([_capture(8, duration_s=None, pool_delta_bytes=None), _capture(16, duration_s=0.5,
                                                                                           pool_delta_bytes=None)],
                                "not in the log", size_name=RUNNER_SIZES).to_plotly_json()
    [duration] = fig["data"]                              # no memory axis: nothing measured it
    assert list(duration["y"]) == [None, 500.0] and fig["layout"]["yaxis"]["title"]["text"] == "capture time (ms)"
    assert [list(d) for d in duration["customdata"]] == [["bs 8", "not in the log"], ["bs 16", "500 ms"]]
    assert fig["layout"]["annotations"][0]["text"] == "pool memory per capture not in the log"


def test_captures_without_any_time_are_not_an_empty_chart():
    fig = charts.capture_figure([_capture(8, duration_s=None)], "not in the log",
                                size_name=RUNNER_SIZES).to_plotly_json()
    assert fig["data"] == [] and "time per size not in the log" in fig["layout"]["annotations"][0]["text"]


def test_padding_per_size_is_a_share_of_decode_tokens_with_counts_in_the_hover():
    hist = [{"raw_bs": 3, "mode": "padded", "steps": 2, "num_tokens": 6, "padded_tokens": 2},
            {"raw_bs": 4, "mode": "graph", "steps": 1, "num_tokens": 4, "padded_tokens": 0}]
    fig = charts.padding_figure(hist).to_plotly_json()
    bars = fig["data"][0]
    assert list(bars["y"]) == [0.25, 0.0]
    assert [list(d) for d in bars["customdata"]] == [["25.0%", "2", "8"], ["0.0%", "0", "4"]]
    assert fig["layout"]["yaxis"]["title"]["text"] == "padded share of decode tokens"


def _parity(bs, diff, rel):
    return {"graph_bs": bs, "max_abs_diff": diff, "rel_err": rel, "tolerance": 0.02}


def test_exact_parity_matches_are_drawn_on_a_linear_axis():
    fig = charts.parity_figure([_parity(4, 0.0, 0.0), _parity(8, 0.0, 0.0)]).to_plotly_json()
    assert fig["layout"]["yaxis"]["type"] == "linear"
    assert list(fig["data"][0]["y"]) == [0.0, 0.0]
    assert fig["data"][0]["name"] == "max |diff| (2 checks, 2 exact)"
    assert fig["layout"]["annotations"][0]["text"] == "tolerance 0.02"


def test_nonzero_parity_divergences_use_a_log_axis():
    fig = charts.parity_figure([_parity(4, 1e-3, 2e-4), _parity(8, 3e-5, 1e-6)]).to_plotly_json()
    assert fig["layout"]["yaxis"]["type"] == "log"
    assert list(fig["data"][0]["customdata"]) == ["0.001", "3e-05"]


def test_the_capture_figures_memory_axis_has_its_own_round_ticks():
    fig = charts.capture_figure([_capture(1, pool_delta_bytes=0), _capture(32, pool_delta_bytes=75_000_000)],
                                size_name=RUNNER_SIZES)
    yaxis2 = fig.to_plotly_json()["layout"]["yaxis2"]
    assert yaxis2["tickmode"] == "auto"              # not synced to the seconds axis (61.0514 MiB)
    assert yaxis2["title"]["text"] == "MiB" and yaxis2["rangemode"] == "tozero"


def test_a_mean_step_time_says_how_many_steps_were_timed():
    fig = charts.step_time_figure([
        {"stage": "decode", "mode": "graph", "steps": 800, "timed_steps": 100, "total_s": 0.15, "mean_s": 0.0015},
        {"stage": "decode", "mode": "eager", "steps": 3, "timed_steps": 3, "total_s": 0.03, "mean_s": 0.01},
    ]).to_plotly_json()
    eager, graph = sorted(fig["data"], key=lambda trace: trace["name"])
    assert [row[1] for row in graph["customdata"]] == ["100 timed steps of 800"]
    assert [row[1] for row in eager["customdata"]] == ["3 steps"]


def test_sizes_spread_thin_over_a_wide_range_are_drawn_as_categories_in_size_order():
    """vLLM's token counts (7, 12, ..., 2048) on a linear 0-2048 axis would be bars too thin to see."""
    def row(bs, mode, steps, padded=0):
        return {"raw_bs": bs, "mode": mode, "steps": steps, "num_tokens": bs * steps, "padded_tokens": padded}

    sparse = [row(7, "padded", 100, 100), row(140, "padded", 20, 80), row(2048, "eager", 9)]
    fig = charts.batch_histogram_figure(sparse, captured=[8, 144, 512], scope="decode and mixed").to_plotly_json()
    axis = fig["layout"]["xaxis"]
    assert axis["type"] == "category" and axis["categoryarray"] == ["7", "8", "140", "144", "512", "2048"]
    assert [list(t["x"]) for t in fig["data"]] == [["7", "140"], ["2048"], ["8", "144", "512"]]
    padding = charts.padding_figure(sparse, scope="decode and mixed").to_plotly_json()
    assert padding["layout"]["xaxis"]["categoryarray"] == ["7", "140", "2048"]
    assert padding["layout"]["yaxis"]["title"]["text"] == "padded share of decode and mixed tokens"
    dense = [row(bs, "graph", 5) for bs in range(1, 40)]          # a runner's batch sizes: a linear axis
    assert "type" not in charts.batch_histogram_figure(dense, captured=[1, 2, 4, 8, 16, 32]).to_plotly_json()[
        "layout"]["xaxis"]
    assert charts.batch_histogram_figure([], scope="mixed").to_plotly_json()["layout"]["annotations"][0][
        "text"] == "no mixed steps yet"


def test_one_fleet_run_gets_an_axis_of_hours_not_half_a_millisecond():
    t = 1796233020.0                                       # 2026-12-02 17:57 UTC
    series = [{"group": "g", "t": t - t % 3600, "bucket_s": 3600, "runs": 1, "eager_ratio": 0.25}]
    fig = charts.fleet_figure(series, "eager_ratio").to_plotly_json()
    x0, x1 = fig["layout"]["xaxis"]["range"]
    assert x0.strftime("%H:%M") == "16:30" and x1.strftime("%H:%M") == "18:30"   # its hour with room either side
    [point] = fig["data"][0]["x"]
    assert point.strftime("%H:%M") == "17:30"             # the middle of its hour, named in the hover
    assert fig["data"][0]["customdata"][0][2] == "2026-12-02 17:00–18:00"
    assert fig["layout"]["xaxis"]["title"]["text"] == "runs started (UTC), per hour"
    assert fig["layout"]["legend"]["y"] > 1                # above the plot, clear of the axis title


def test_a_short_series_ticks_whole_seconds():
    axis = charts.time_axis([100.0, 101.0])
    assert axis["dtick"] % 1000 == 0 and axis["tickformat"] == "%H:%M:%S"
