"""A weekly report of a week without data says so, and the current week is reported only to
date with ``--partial`` (#16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal

import numpy as np
from click.testing import CliRunner

from infersight.cli.group import cli
from infersight.service.report_render import summary_line
from infersight.service.reports import WeeklyReports, week_of
from infersight.storage.maintenance import RetentionPolicy
from infersight.storage.sql_store import SqlStore
from infersight.storage.writer import open_writer
from tests.cost.conftest import api_for
from tests.cost.scenario import MODEL, WEEK
from tests.factories import make_records

PERIOD = "2026-W48"
EMPTY = "2026-W40"


def _job(week) -> WeeklyReports:
    return WeeklyReports(SqlStore(week.engine), lambda: MODEL, "UTC", RetentionPolicy().finest_for)


def _weekly(week, tmp_path, *args: str):
    return CliRunner().invoke(
        cli,
        ["--store", week.url, "report", "weekly", "--out", str(tmp_path), *args],
        env={"INFERSIGHT_COST_MODEL": "worked"},
    )


def test_a_week_without_data_is_refused_with_the_window_it_looked_at(week, tmp_path):
    """Issue 35 (item 8): a week without data is no report of zeros; the refusal names the
    window (``tests/cost/test_weekly_report_newcomer.py`` checks nothing is stored)."""
    result = _weekly(week, tmp_path, "--week", EMPTY)
    assert result.exit_code != 0
    notice = f"no data recorded for {EMPTY} in this store"
    assert notice in str(result.exception)
    assert "2026-09-28T00:00:00Z" in str(result.exception)  # the window it looked at
    assert not list(tmp_path.glob("cost-report-*"))


def test_a_week_with_data_has_no_notice(week, tmp_path):
    result = _weekly(week, tmp_path, "--week", PERIOD)
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr
    assert json.loads((tmp_path / f"cost-report-{PERIOD}.json").read_text())["notice"] is None


def test_the_summary_line_of_a_notice_leads_with_it(week):
    body = _job(week).generate(PERIOD, WEEK.end).body
    body["notice"] = f"no data recorded for {EMPTY}"
    # The stored summary line (what the Slack message says) leads with a notice.
    assert summary_line(body).startswith(f"Week {PERIOD}: no data recorded")


def _requests_this_week(store) -> None:
    now = datetime.now(UTC)
    monday = datetime.combine(now.date() - timedelta(days=now.weekday()), time(), tzinfo=UTC)
    start = max(now - timedelta(minutes=6), monday)
    span = max((now - start) * 0.8, timedelta(milliseconds=10))
    open_writer(store.engine).write_requests(
        make_records(np.random.default_rng(11), start, 50, span=span)
    )


def test_the_current_week_is_refused_without_partial_and_named_to_date_with_it(week, tmp_path):
    current = week_of(datetime.now(UTC).date())
    _requests_this_week(week)  # a week without data is refused (issue 35): give it some
    # The installed command's entry point, which prints the error (CliRunner would raise it).
    entry = [sys.executable, "-c", "from infersight.cli import main; main()"]
    refused = subprocess.run(
        [
            *entry,
            "--store",
            week.url,
            "report",
            "weekly",
            "--week",
            current,
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "INFERSIGHT_COST_MODEL": "worked"},
        check=False,
    )
    assert refused.returncode != 0
    assert f"{current} has not ended yet" in refused.stderr
    assert "infersight report weekly --partial" in refused.stderr
    assert not list(tmp_path.glob("cost-report-*"))
    partial = _weekly(week, tmp_path, "--week", current, "--partial")
    assert partial.exit_code == 0, partial.output
    body = json.loads((tmp_path / f"cost-report-{current}.json").read_text())
    assert body["partial"] is True
    assert body["title"].startswith(f"{current}, week to date until ")
    assert f"report {body['title'].split(',')[0]}" not in partial.stdout  # the title, not the id
    assert "week to date until" in partial.stdout
    html = (tmp_path / f"cost-report-{current}.html").read_text()
    assert f"Cost report {current}, week to date until" in html


def test_a_partial_report_covers_the_week_up_to_now(week):
    now = WEEK.start + timedelta(days=3, hours=12)
    job = _job(week)
    partial = job.generate(PERIOD, now, partial=True).body
    assert partial["end"] == now.isoformat().replace("+00:00", "Z")
    assert [d["date"] for d in partial["daily"]] == [
        (WEEK.start + timedelta(days=i)).date().isoformat() for i in range(4)
    ]
    whole = job.generate(PERIOD, WEEK.end).body
    assert whole["partial"] is False
    assert whole["title"] == PERIOD
    assert 0 < Decimal(partial["summary"]["cost"]) < Decimal(whole["summary"]["cost"])


def test_the_api_reports_the_current_week_to_date_with_partial_true(week):
    """``POST /api/v1/reports/weekly?partial=true`` does what ``report weekly --partial`` does:
    the week not yet ended is refused without it (naming both ways to ask), reported to date
    with it, and the whole week's report replaces that one once the week is over."""
    api = api_for(week, cost_model="worked")
    api.clock.now = WEEK.start + timedelta(days=3, hours=12)
    refused = api.request("POST", "/api/v1/reports/weekly", params={"week": PERIOD})
    assert refused.status_code == 400
    assert "partial=true" in refused.text
    assert "--partial" in refused.text
    made = api.request("POST", "/api/v1/reports/weekly", params={"week": PERIOD, "partial": "true"})
    assert made.status_code == 200, made.text
    info = made.json()
    assert info["partial"] is True
    body = api.get(info["links"]["json"]).json()
    assert body["partial"] is True
    assert body["end"] == api.clock.now.isoformat().replace("+00:00", "Z")
    assert body["title"].startswith(f"{PERIOD}, week to date until ")
    assert len(body["daily"]) == 4
    api.clock.now = WEEK.end + timedelta(hours=1)
    whole = api.request("POST", "/api/v1/reports/weekly", params={"week": PERIOD}).json()
    assert whole["partial"] is False
    assert api.get(whole["links"]["json"]).json()["title"] == PERIOD
    listed = api.get("/api/v1/reports", params={"kind": "weekly"}).json()["reports"]
    assert [r["period"] for r in listed].count(PERIOD) == 1  # replaced, not added
