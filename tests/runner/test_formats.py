"""replayscope.app.formats: the one way the dashboard writes counts, shares, durations and sizes."""

import pytest

from replayscope.contract import formats


@pytest.mark.parametrize("n, text", [(0, "0 runs"), (1, "1 run"), (2, "2 runs"), (1234, "1,234 runs")])
def test_plural_agrees_with_the_count(n, text):
    assert formats.plural(n, "run") == text


def test_plural_takes_an_irregular_form():
    assert formats.plural(1, "batch", "batches") == "1 batch"
    assert formats.plural(3, "batch", "batches") == "3 batches"


@pytest.mark.parametrize("ratio, text", [(0.0, "0.0%"), (0.1234, "12.3%"), (1.0, "100%"), (0.9996, "100%"),
                                         (0.9994, "99.9%"), (0.0004, "<0.1%"), (0.006, "0.6%")])
def test_pct_has_one_decimal_and_never_rounds_a_share_down_to_zero(ratio, text):
    assert formats.pct(ratio) == text


@pytest.mark.parametrize("value, text", [
    (0, "0 s"), (0.00035, "350 µs"), (0.0123, "12.3 ms"), (0.4264, "426 ms"), (0.9996, "1.00 s"),
    (1.4321, "1.43 s"), (45.67, "45.7 s"), (125.0, "2 min 05 s"), (3725.0, "1 h 02 min"), (-0.5, "−500 ms"),
])
def test_seconds_picks_the_unit_that_reads_best_with_three_figures(value, text):
    assert formats.seconds(value) == text


def test_signed_seconds_shows_the_sign():
    assert formats.signed_seconds(1.2) == "+1.20 s"
    assert formats.signed_seconds(-0.35) == "−350 ms"


@pytest.mark.parametrize("value, text", [
    (512, "512 B"), (1536, "1.50 KiB"), (53_687_092, "51.2 MiB"), (1_048_166, "1.00 MiB"),
    (1.25 * 2**30, "1.25 GiB"), (300 * 2**20, "300 MiB"),
])
def test_size_rounds_bytes_to_three_figures_in_a_binary_unit(value, text):
    assert formats.size(value) == text


def test_byte_unit_follows_the_largest_value():
    assert formats.byte_unit(900) == ("B", 1)
    assert formats.byte_unit(53_687_092) == ("MiB", 2**20)
    assert formats.byte_unit(3 * 2**30) == ("GiB", 2**30)


def test_number_has_no_float_noise():
    assert formats.number(51.200000782) == "51.2"
    assert formats.number(0.00123456) == "0.00123"
    assert formats.number(123456.7) == "123,457"


@pytest.mark.parametrize("source, wording", [
    ("vllm-log", "not in the log"), ("sglang-log", "not in the log"), ("runner", "not measured"),
    ("library", "not measured"), ("trace", "not measured"), ("vllm-metrics", "not measured"),
    ("sglang-metrics", "not measured"),
])
def test_unknown_says_why_from_the_runs_source(source, wording):
    assert formats.unknown(source) == wording


@pytest.mark.parametrize("fmt", [formats.count, formats.pct, formats.seconds, formats.signed_seconds,
                                 formats.size, formats.number, formats.when])
def test_an_unknown_value_is_never_written_as_zero_or_a_dash(fmt):
    assert fmt(None) == "not measured"
    assert fmt(None, missing="not in the log") == "not in the log"
