"""The weekly cost report's purchasing section: the same JSON as ``GET /api/v1/purchasing`` for
the week, rendered into the HTML with every figure's exact value, and the next command when
the week holds no GPU data."""

from __future__ import annotations

from datetime import timedelta
from html.parser import HTMLParser

from infersight.core.timestamps import iso
from infersight.service.report_render import render_html
from infersight.service.reports import WeeklyReports, build_weekly
from infersight.storage.maintenance import RetentionPolicy
from infersight.storage.sql_store import SqlStore
from tests.conftest import Store
from tests.cost.conftest import api_for
from tests.purchasing import scenario as s

PERIOD = "2026-W48"


class _Fields(HTMLParser):
    """``data-field`` → ``data-value`` inside the purchasing section (by table or paragraph)."""

    def __init__(self) -> None:
        super().__init__()
        self.where: list[str] = []
        self.values: dict[tuple[str, str], list[str]] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-purchasing" in a:
            self.where.append(a["data-purchasing"])
        elif "data-field" in a and self.where:
            self.values.setdefault((self.where[-1], a["data-field"]), []).append(a["data-value"])


def _job(store: Store) -> WeeklyReports:
    return WeeklyReports(store.sql, lambda: s.MODEL, "UTC", RetentionPolicy().finest_for)


def test_the_report_embeds_the_apis_purchasing_answer_for_the_week(fleet: Store):
    generated = _job(fleet).generate(PERIOD, s.WEEK.end + timedelta(hours=9))
    api = api_for(fleet, cost_model=s.MODEL.name)
    api.clock.now = s.WEEK.end + timedelta(hours=9)
    answer = api.get(
        "/api/v1/purchasing", params={"start": iso(s.WEEK.start), "end": iso(s.WEEK.end)}
    ).json()
    assert generated.body["purchasing"] == answer
    assert generated.body["purchasing"]["split"]["saving"] == str(s.SAVING)


def test_the_html_shows_the_split_and_the_windows_with_their_exact_values(fleet: Store):
    generated = _job(fleet).generate(PERIOD, s.WEEK.end + timedelta(hours=9))
    parser = _Fields()
    parser.feed(generated.html)
    fields = parser.values
    assert fields[("advice", "reserved_gpus")] == [str(s.RESERVED_GPUS)]
    assert fields[("advice", "split_cost")] == [str(s.SPLIT_COST)]
    assert fields[("advice", "saving")] == [str(s.SAVING)]
    assert fields[("split", "reserved_per_gpu_hour")] == ["2.800000"]
    assert fields[("windows", "idle_cost")] == [str(s.WINDOW_IDLE_COST)] * 5
    assert "Mon 01:00–07:00" in generated.html
    assert "Reserve <strong" in generated.html


def test_a_week_without_gpu_data_names_the_next_command(fleet: Store):
    # A week without any data is no report (issue 35), so the body is built and rendered.
    finest = RetentionPolicy().finest_for
    body = build_weekly(SqlStore(fleet.engine), s.MODEL, "2026-W40", "UTC", finest, s.WEEK.end)
    assert body["purchasing"]["empty"] is not None
    assert "infersight sidecar --instance NAME" in render_html(body)
