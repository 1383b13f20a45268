"""Windows split into raw edges and rollup buckets that cover them exactly."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infersight.core.errors import InvalidInput
from infersight.core.window import Resolution, Window, format_duration, parse_duration, split

instants = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)
)


@given(instants, st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(days=90)))
def test_segments_cover_the_window_exactly_with_aligned_rollup_pieces(start, length):
    window = Window(start, start + length)
    segments = split(window)
    assert segments[0].start == window.start
    assert segments[-1].end == window.end
    for left, right in itertools.pairwise(segments):
        assert left.end == right.start  # no gap, no overlap
    for segment in segments:
        assert segment.start < segment.end
        if segment.resolution is not None:
            assert segment.resolution.floor(segment.start) == segment.start
            assert segment.resolution.floor(segment.end) == segment.end
        else:
            assert segment.end - segment.start < timedelta(minutes=1)
    assert sum(1 for s in segments if s.raw) <= 2


def test_a_month_is_served_mostly_from_day_rollups():
    window = Window(
        datetime(2026, 10, 1, 7, 30, 15, tzinfo=UTC), datetime(2026, 10, 31, 18, 5, 2, tzinfo=UTC)
    )
    kinds = [(s.resolution, s.start, s.end) for s in split(window)]
    assert (
        Resolution.DAY,
        datetime(2026, 10, 2, tzinfo=UTC),
        datetime(2026, 10, 31, tzinfo=UTC),
    ) in kinds
    assert len(kinds) == 7  # raw, minutes, hours, days, hours, minutes, raw


def test_finest_resolution_is_respected():
    window = Window(
        datetime(2026, 10, 1, 7, 30, tzinfo=UTC), datetime(2026, 10, 3, 1, 0, tzinfo=UTC)
    )
    assert all(s.resolution is not Resolution.MINUTE for s in split(window, Resolution.HOUR))


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (datetime(2026, 1, 2, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC), "after its start"),
        (datetime(2026, 1, 1), datetime(2026, 1, 2), "timezone-aware"),
    ],
)
def test_bad_windows_are_refused(start, end, message):
    with pytest.raises(InvalidInput, match=message):
        Window(start, end)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("5m", 300), ("1h", 3600), ("28d", 28 * 86400), ("2w", 1209600)],
)
def test_durations_parse_and_format_back(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)
    assert parse_duration(format_duration(parse_duration(text))) == parse_duration(text)


@pytest.mark.parametrize("text", ["", "h", "1x", "-5m", "0s", "1.5h"])
def test_bad_durations_are_refused(text):
    with pytest.raises(InvalidInput):
        parse_duration(text)
