"""The dashboard's pure parts: axis ticks, URL context, quantile parsing, SVG escaping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infersight.api.dashboard import charts as svg
from infersight.api.dashboard.context import parse_context, parse_quantile
from infersight.api.dashboard.shared import ChartStep
from infersight.core.errors import InvalidInput
from infersight.core.window import Resolution

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@given(
    st.floats(min_value=0, max_value=1e9, allow_nan=False),
    st.floats(min_value=1e-6, max_value=1e9, allow_nan=False),
)
def test_ticks_are_round_ascending_and_cover_the_range(low, width):
    high = low + width
    ticks = svg.nice_ticks(low, high)
    assert ticks == sorted(ticks)
    assert ticks[0] <= low * (1 + 1e-9) + 1e-12
    assert ticks[-1] >= high * (1 - 1e-9)
    assert 2 <= len(ticks) <= 12


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0.99),
        ("0.5", 0.5),
        ("p90", 0.9),
        ("P99", 0.99),
        ("99.9", 0.999),
        ("p99.9", 0.999),
        ("1", 0.01),
    ],
)
def test_a_quantile_is_read_as_a_fraction_or_a_percentile(text, expected):
    assert parse_quantile(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["x", "0", "100", "p100", "-5", "nan"])
def test_a_quantile_outside_0_and_1_is_refused(text):
    with pytest.raises(InvalidInput):
        parse_quantile(text)


def test_the_context_keeps_range_filters_and_refresh_in_links():
    ctx = parse_context({"range": "6h", "model": "m/a b", "refresh": "1m"}, NOW, 400)
    assert ctx.window.end == NOW
    assert ctx.window.start == NOW - timedelta(hours=6)
    assert ctx.step is Resolution.HOUR
    assert ctx.query() == "?range=6h&model=m%2Fa+b&refresh=1m"
    assert ctx.query(model=None, range="1h") == "?refresh=1m"
    page = ctx.with_extra(q="0.5")
    assert "q=0.5" in page.query()
    assert "q=" not in page.nav_query()


def test_a_custom_range_is_kept_as_start_and_end_and_capped_in_length():
    ctx = parse_context({"start": "1772438400", "end": "2026-03-02T09:00:00Z"}, NOW, 400)
    assert ctx.range_key == "custom"
    assert ctx.step is Resolution.MINUTE
    assert ctx.params() == {"start": "2026-03-02T08:00:00Z", "end": "2026-03-02T09:00:00Z"}
    with pytest.raises(InvalidInput, match="at most 7 days"):
        parse_context({"range": "30d"}, NOW, 7)


@pytest.mark.parametrize(
    ("span", "finest", "bucket"),
    [
        (timedelta(minutes=15), 60, 60),
        (timedelta(hours=1), 60, 60),
        (timedelta(hours=3), 60, 60),  # the virtual demo's scenario: 180 points
        (timedelta(hours=6), 60, 120),
        (timedelta(days=1), 60, 600),
        (timedelta(days=7), 60, 3600),
        (timedelta(days=30), 3600, 21600),
        (timedelta(hours=3), 3600, 3600),  # minute rollups dropped: hours are the finest
        (timedelta(hours=3), 86400, 86400),
    ],
)
def test_a_charts_bucket_suits_its_range_and_is_coarser_only_where_retention_says(
    span: timedelta, finest: int, bucket: int
):
    assert svg.bucket_seconds(span.total_seconds(), finest) == bucket
    points = span.total_seconds() / bucket
    if finest == 60 and span >= timedelta(hours=1):
        assert 60 <= points <= svg.CHART_POINTS  # a line, not dots, at every range


def test_chart_buckets_add_up_the_rollup_buckets_inside_them():
    step = ChartStep(600, Resolution.MINUTE)
    assert step.value == "10m"
    at = datetime(2026, 3, 2, 8, 17, 42, tzinfo=UTC)
    assert step.floor(at) == datetime(2026, 3, 2, 8, 10, tzinfo=UTC)


def test_chart_text_is_escaped():
    start = NOW - timedelta(hours=1)
    series = [svg.Series("<script>alert(1)</script>", [(start, 1.0), (NOW, 2.0)])]
    html = str(svg.line_chart(series, start, NOW, label='a "label"'))
    assert "<script>" not in html
    assert "&lt;script&gt;" in html
    assert 'aria-label="a "label""' not in html
    assert "&quot;label&quot;" in html


def test_a_missing_bucket_breaks_the_line():
    start = NOW - timedelta(minutes=3)
    points = [(start + timedelta(minutes=i), v) for i, v in enumerate([1.0, 2.0, None, 3.0])]
    html = str(svg.line_chart([svg.Series("s", points)], start, NOW, label="x"))
    assert html.count("<polyline") == 1
    assert html.count("<circle") == 1


@pytest.mark.parametrize(
    ("bucket_start_s", "expected_s"),
    [
        pytest.param(-600, 600.0, id="a whole bucket inside the window divides by the whole step"),
        pytest.param(-90, 90.0, id="the bucket cut at now divides by the 90 seconds it covers"),
        pytest.param(-1200, 300.0, id="a bucket cut at the window's start divides by its part"),
        pytest.param(0, 1.0, id="a bucket starting at now never divides by zero"),
    ],
)
def test_a_chart_rate_divides_by_the_part_of_its_bucket_inside_the_window(
    bucket_start_s, expected_s
):
    from infersight.api.dashboard.shared import bucket_span_s
    from infersight.core.window import Window

    step = ChartStep(600, Resolution.MINUTE)
    window = Window(NOW - timedelta(seconds=900), NOW)
    start = NOW + timedelta(seconds=bucket_start_s)
    assert bucket_span_s(start, step, window) == pytest.approx(expected_s)
