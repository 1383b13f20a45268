"""The weekly cost report from a simulated week: every number in its JSON, CSV and HTML is
what ``GET /api/v1/cost`` answers for the same window; savings come in the engineer's order;
the job stores it and posts one Slack summary."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from decimal import Decimal
from html.parser import HTMLParser

import httpx
import pytest
from click.testing import CliRunner

from infersight.alerts.notifiers.slack import SlackNotifier
from infersight.cli.group import cli
from infersight.core.errors import ConfigurationError, InvalidInput, NotFound
from infersight.service.notifications import Delivery
from infersight.service.reports import (
    CSV_COLUMNS,
    WeeklyReports,
    day_windows,
    parse_schedule,
    previous_week,
    zone,
)
from infersight.storage.maintenance import RetentionPolicy
from infersight.storage.sql_store import SqlStore
from tests.cost.conftest import api_for
from tests.cost.scenario import MODEL, WEEK

PERIOD = "2026-W48"
#: Columns only the attribution rows fill (empty in the cost rows).
ATTRIBUTION_ONLY = ("group", "usage_cost")
PER_MILLION = {
    "cost_per_million_tokens": "total",
    "cost_per_million_input_tokens": "input",
    "cost_per_million_output_tokens": "output",
    "cost_per_million_good_tokens": "good",
}


class _Cells(HTMLParser):
    """Rows of the report's tables: (section, date, model, instance) → {field: data-value}."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[tuple[str, str, str, str], dict[str, str]] = {}
        self._row: dict[str, str] | None = None
        self.svgs = 0
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "data-section" in a:
            key = (a["data-section"], a["data-date"], a["data-model"], a["data-instance"])
            self._row = self.rows.setdefault(key, {})
        elif tag == "td" and self._row is not None and "data-field" in a:
            self._row[a["data-field"]] = a["data-value"]
        elif tag == "svg":
            self.svgs += 1
        elif tag == "script":
            self.scripts += 1

    def handle_endtag(self, tag):
        if tag == "tr":
            self._row = None


def _value(line, field):
    """A field of an API cost line as the report's CSV/HTML write it."""
    if field in PER_MILLION:
        value = line["cost_per_million_tokens"][PER_MILLION[field]]
    else:
        value = line[field]
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def _cost(api, window, **params):
    response = api.get(
        "/api/v1/cost",
        params={"start": window.start.isoformat(), "end": window.end.isoformat(), **params},
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    # When and how fresh the API computed it is the answer's envelope, not the report's content.
    assert answer.pop("staleness_s") is not None
    answer.pop("as_of")
    return answer


def test_the_weekly_report_holds_exactly_what_the_api_answers(week, tmp_path):
    api = api_for(week, cost_model="worked")
    api.clock.now = WEEK.end + timedelta(hours=9)
    made = api.request("POST", "/api/v1/reports/weekly", params={"week": PERIOD})
    assert made.status_code == 200, made.text
    info = made.json()
    listed = api.get("/api/v1/reports", params={"kind": "weekly"}).json()["reports"]
    assert [r["id"] for r in listed] == [info["id"]]
    body = api.get(info["links"]["json"]).json()
    html = api.get(info["links"]["html"])
    assert html.headers["content-type"].startswith("text/html")
    text = api.get(info["links"]["csv"]).text

    # JSON: the API's own answers, embedded.
    by_model = _cost(api, WEEK, group_by="model")
    by_instance = _cost(api, WEEK, group_by="instance")
    assert body["by_model"] == by_model
    assert body["by_instance"] == by_instance
    days = day_windows(PERIOD, zone("UTC"))
    assert [d["date"] for d in body["daily"]] == [day.isoformat() for day, _ in days]
    daily = {day.isoformat(): _cost(api, window) for day, window in days}
    for entry in body["daily"]:
        assert {k: v for k, v in entry.items() if k != "date"} == daily[entry["date"]]
    assert body["summary"]["cost"] == by_model["total"]["cost"]
    assert (
        body["summary"]["cost_per_million_tokens"]
        == by_model["total"]["cost_per_million_tokens"]["total"]
    )

    # CSV: every row, every column.
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == list(CSV_COLUMNS)
    attributed = [r for r in rows if r["section"].startswith("attribution_")]
    rows = [r for r in rows if not r["section"].startswith("attribution_")]
    expected = {}
    for section, answer in (("by_model", by_model), ("by_instance", by_instance)):
        for g in answer["groups"]:
            expected[
                (section, "", g["labels"].get("model", ""), g["labels"].get("instance", ""))
            ] = g
    for day, answer in daily.items():
        expected[("daily", day, "", "")] = answer["total"]
    expected[("total", "", "", "")] = by_model["total"]
    assert {(r["section"], r["date"], r["model"], r["instance"]) for r in rows} == set(expected)
    for row in rows:
        line = expected[(row["section"], row["date"], row["model"], row["instance"])]
        for field in CSV_COLUMNS[4:]:
            want = "" if field in ATTRIBUTION_ONLY else _value(line, field)
            assert row[field] == want, (row["section"], field)
    # Who spent it: each share of the week, as GET /api/v1/cost/attribution answers it.
    for dimension in ("tenant", "team", "workload"):
        answer = api.get(
            "/api/v1/cost/attribution",
            params={"start": WEEK.start.isoformat(), "end": WEEK.end.isoformat(),
                    "dimension": dimension},
        ).json()  # fmt: skip
        mine = [r for r in attributed if r["section"] == f"attribution_{dimension}"]
        assert mine, dimension
        assert [r["group"] for r in mine] == [s["label"] for s in answer["shares"]]
        for row, share in zip(mine, answer["shares"], strict=True):
            goodput = share["goodput"]
            assert (row["cost"], row["usage_cost"], row["idle_cost"]) == (
                share["allocation"], share["usage"], share["idle"],
            )  # fmt: skip
            assert (row["requests"], row["gpu_hours"], row["good_tokens"]) == (
                str(share["requests"]), share["gpu_hours"], str(goodput["good_tokens"]),
            )  # fmt: skip
            assert int(row["tokens"]) == share["input_tokens"] + share["output_tokens"]
            assert row["cost_per_million_good_tokens"] == (
                goodput["cost_per_million_good_tokens"] or ""
            )
            assert row["model"] == row["instance"] == row["date"] == row["energy_kwh"] == ""
        week_cost = Decimal(body["summary"]["cost"])
        assert sum(Decimal(r["cost"]) for r in mine) == week_cost
        assert sum(Decimal(r["usage_cost"]) + Decimal(r["idle_cost"]) for r in mine) == week_cost

    # HTML: every number cell carries the API's value.
    cells = _Cells()
    cells.feed(html.text)
    assert cells.svgs == 4
    assert cells.scripts == 0
    assert set(cells.rows) == set(expected)
    for key, fields in cells.rows.items():
        assert len(fields) == 11
        for field, value in fields.items():
            assert value == _value(expected[key], field), (key, field)

    # The worked H200 is in there with its hand-computed unit cost.
    llama70 = next(g for g in by_model["groups"] if g["labels"]["model"] == "llama-70b")
    assert llama70["cost_per_million_tokens"]["total"] == "56.000000"

    # The CLI writes the same report to files.
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli,
        ["--store", week.url, "report", "weekly", "--week", PERIOD, "--out", str(out)],
        env={"INFERSIGHT_COST_MODEL": "worked"},
    )
    assert result.exit_code == 0, result.output
    written = json.loads((out / f"cost-report-{PERIOD}.json").read_text())
    assert {k: v for k, v in written.items() if k != "generated_at"} == {
        k: v for k, v in body.items() if k != "generated_at"
    }
    assert (out / f"cost-report-{PERIOD}.csv").read_text() == text
    assert "<svg" in (out / f"cost-report-{PERIOD}.html").read_text()


def test_savings_come_free_configuration_first_then_model_then_hardware(week):
    api = api_for(week, cost_model="worked")
    api.clock.now = WEEK.end + timedelta(hours=9)
    info = api.request("POST", "/api/v1/reports/weekly", params={"week": PERIOD}).json()
    savings = api.get(info["links"]["json"]).json()["savings"]
    order = {"configuration": 1, "model": 2, "hardware": 3}
    ranks = [(order[s["category"]], -float(s["estimated_saving"])) for s in savings]
    assert ranks == sorted(ranks)
    kinds = {(s["kind"], s["scope"]) for s in savings}
    assert savings[0]["kind"] == "consolidation"
    # The H200 that served nothing would save its whole cost.
    idle = next(s for s in savings if s["scope"] == "h200-idle")
    assert idle["kind"] == "consolidation"
    assert idle["estimated_saving"] == "79.488000"
    assert ("consolidation", "model=llama-8b") in kinds  # two L40S at 15-20 %
    assert ("batching", "l40s-0") in kinds  # requests wait while the GPU idles
    assert ("queue_limits", "h200-a") in kinds  # one request in five missed its TTFT
    assert ("quantisation", "model=llama-70b") in kinds
    for s in savings:
        assert s["evidence"]
        assert s["assumption"]


def test_the_job_reports_last_week_once_and_slack_gets_one_summary(week):
    sent = []

    def slack(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, text="ok")

    client = httpx.Client(transport=httpx.MockTransport(slack))
    try:
        notifiers = {"slack": SlackNotifier("https://hooks.slack.invalid/x", client)}
        job = WeeklyReports(
            SqlStore(week.engine),
            lambda: MODEL,
            "UTC",
            RetentionPolicy().finest_for,
            notifiers=notifiers,
            base_url="http://127.0.0.1:8080",
        )
        monday_nine = WEEK.end + timedelta(hours=9)
        assert previous_week(monday_nine, zone("UTC")) == PERIOD
        first = job(monday_nine)
        again = job(monday_nine + timedelta(minutes=1))  # a re-run replaces, never re-posts
        delivery = Delivery(SqlStore(week.engine), notifiers)
        assert delivery(monday_nine + timedelta(minutes=2)).delivered == 1
    finally:
        client.close()
    assert first.period == again.period == PERIOD
    assert first.id == again.id
    (message,) = sent
    spent = Decimal(again.body["summary"]["cost"])
    assert message["text"].startswith(f"Week {PERIOD}: {spent:,.2f} USD")
    button = message["blocks"][-1]["elements"][0]
    assert button["url"] == f"http://127.0.0.1:8080/api/v1/reports/{again.id}/html"


@pytest.mark.parametrize(
    ("schedule", "fields"),
    [
        ("mon 09:00", {"day_of_week": "mon", "hour": 9, "minute": 0}),
        ("Fri 17:30", {"day_of_week": "fri", "hour": 17, "minute": 30}),
    ],
    ids=["the default is Monday nine o'clock", "any day and time can be chosen"],
)
def test_report_schedules_become_cron_fields(schedule, fields):
    assert parse_schedule(schedule) == fields


def test_bad_weeks_schedules_and_zones_are_refused():
    with pytest.raises(ConfigurationError):
        parse_schedule("monday at nine")
    with pytest.raises(ConfigurationError):
        zone("Mars/Olympus_Mons")
    with pytest.raises(InvalidInput):
        day_windows("2026-W54", zone("UTC"))
    with pytest.raises(InvalidInput):
        day_windows("48", zone("UTC"))


def test_a_week_in_a_time_zone_with_a_dst_change_has_a_long_day():
    days = day_windows("2026-W43", zone("Europe/Berlin"))  # clocks go back on Sunday 25 October
    lengths = {w.seconds / 3600 for _, w in days}
    assert lengths == {24.0, 25.0}


def test_a_week_that_has_not_ended_is_not_reported(week):
    api = api_for(week, cost_model="worked")
    api.clock.now = WEEK.end - timedelta(hours=1)
    refused = api.request("POST", "/api/v1/reports/weekly", params={"week": PERIOD})
    assert refused.status_code == 400
    assert api.get("/api/v1/reports/999").status_code == 404


def test_serve_schedules_the_report_for_monday_nine_in_the_report_time_zone(week, request):
    api = api_for(week, report_timezone="Europe/Berlin", cost_model="worked")
    jobs = api.app.state.context.jobs
    request.addfinalizer(jobs.stop)  # the tick after stop() takes the leader lock again
    jobs.start()
    try:
        run = jobs._scheduler.get_job("report").next_run_time
    finally:
        jobs.stop()
    local = run.astimezone(zone("Europe/Berlin"))
    assert (local.weekday(), local.hour, local.minute) == (0, 9, 0)
    assert jobs.tick_report() is True  # a tick reports the week that ended before "now"
    assert jobs.runs["report"] == 1


def test_a_week_with_no_data_makes_no_report(week, tmp_path):
    """Issue 35 (item 8): refused, not stored as a report of zeros."""
    job = WeeklyReports(SqlStore(week.engine), lambda: MODEL, "UTC", RetentionPolicy().finest_for)
    with pytest.raises(NotFound, match="no data recorded for 2026-W40"):
        job.generate("2026-W40", WEEK.end)
