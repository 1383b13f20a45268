"""A weekly report of a week without data says so, and the current week is reported only to
date with ``--partial`` (#16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from click.testing import CliRunner

from infersight.cli.group import cli
from infersight.service.report_render import summary_line
from infersight.service.reports import WeeklyReports, week_of
from infersight.storage.maintenance import RetentionPolicy
from tests.cost.conftest import api_for
from tests.cost.scenario import MODEL, WEEK

PERIOD = "2026-W48"
EMPTY = "2026-W40"


def _job(week) -> WeeklyReports:
    return WeeklyReports(week.engine, lambda: MODEL, "UTC", RetentionPolicy().finest_for)


def _weekly(week, tmp_path, *args: str):
    return CliRunner().invoke(
        cli,
        ["--store", week.url, "report", "weekly", "--out", str(tmp_path), *args],
        env={"INFERSIGHT_COST_MODEL": "worked"},
    )


def test_a_week_without_data_says_so_in_the_report_and_on_stderr(week, tmp_path):
    result = _weekly(week, tmp_path, "--week", EMPTY)
    assert result.exit_code == 0, result.output
    notice = f"no data recorded for {EMPTY} in this store"
    assert f"warning: {notice}" in result.stderr
    assert notice not in result.stdout
    html = (tmp_path / f"cost-report-{EMPTY}.html").read_text()
    # At the top: right after the title, before any figure.
    assert html.index(notice) < html.index('data-section="summary"')
    body = json.loads((tmp_path / f"cost-report-{EMPTY}.json").read_text())
    assert body["notice"].startswith(notice)
    assert "2026-09-28T00:00:00Z" in body["notice"]  # the window it looked at


def test_a_week_with_data_has_no_notice(week, tmp_path):
    result = _weekly(week, tmp_path, "--week", PERIOD)
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr
    assert json.loads((tmp_path / f"cost-report-{PERIOD}.json").read_text())["notice"] is None


def test_the_scheduled_job_states_the_same_notice_in_its_summary(week):
    generated = _job(week).generate(EMPTY, WEEK.end)
    assert generated.body["notice"].startswith(f"no data recorded for {EMPTY}")
    # The stored summary line (what the Slack message says) leads with it.
    assert summary_line(generated.body).startswith(f"Week {EMPTY}: no data recorded")
    assert f"no data recorded for {EMPTY}" in generated.html


def test_the_current_week_is_refused_without_partial_and_named_to_date_with_it(week, tmp_path):
    current = week_of(datetime.now(UTC).date())
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
