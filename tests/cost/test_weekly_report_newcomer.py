"""The weekly report as a newcomer meets it (issue 35, item 8).

``report weekly --partial`` reported last week (empty) instead of this one; plain ``report
weekly`` wrote three files into the current directory and stored a report of zeros; the HTML
said "Next: None.", cut its tables at 1,100 px, cut chart labels and carried a microsecond
timestamp in its title. Now: ``--partial`` alone is this week to date; a week with no data is
refused (CLI exit 2, API 404 ``no_data``, the job skips it) and nothing is stored or written;
files go only where ``--out`` says; the HTML is checked in Chromium.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import numpy as np
import pytest

from infersight.service.report_render import render_html
from infersight.service.reports import EmptyReport, WeeklyReports, week_of
from infersight.storage import reports as report_store
from infersight.storage.maintenance import RetentionPolicy
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.cost.conftest import api_for
from tests.cost.scenario import MODEL, WEEK
from tests.factories import make_records

CHROMIUM = os.environ.get("INFERSIGHT_CHROMIUM", "/usr/bin/chromium")
ENTRY = [sys.executable, "-c", "from infersight.cli import main; main()"]
EMPTY = "2026-W40"
PERIOD = "2026-W48"
LONG_MODEL = "meta-llama/Llama-3.1-70B-Instruct-with-a-long-fine-tune-name"


def _cli(store: Store, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("INFERSIGHT_")}
    return subprocess.run(
        [*ENTRY, "--store", store.url, "report", "weekly", *args],
        cwd=cwd,
        env={**env, "INFERSIGHT_COST_MODEL": "worked"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _job(store: Store) -> WeeklyReports:
    return WeeklyReports(store.sql, lambda: MODEL, "UTC", RetentionPolicy().finest_for)


def test_partial_alone_reports_this_week_and_writes_files_only_under_out(
    store: Store, tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    monday = datetime.combine(now.date() - timedelta(days=now.weekday()), time(), tzinfo=UTC)
    start = max(now - timedelta(minutes=6), monday)  # inside this week, whenever it runs
    span = max((now - start) * 0.8, timedelta(milliseconds=10))
    records = make_records(np.random.default_rng(7), start, 200, span=span)
    open_writer(store.engine).write_requests(records)
    current = week_of(now.date())
    done = _cli(store, tmp_path, "--partial")
    assert done.returncode == 0, done.stderr
    assert f"for {current}, week to date until " in done.stdout
    assert "--out DIR" in done.stdout  # says how to get the files
    assert not list(tmp_path.iterdir())  # nothing written into the current directory
    out = tmp_path / "reports"
    done = _cli(store, tmp_path, "--partial", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        f"cost-report-{current}.{ext}" for ext in ("csv", "html", "json")
    ]
    body = json.loads((out / f"cost-report-{current}.json").read_text())
    assert body["partial"] is True
    assert body["summary"]["tokens"] > 0
    # The title to the minute: no seconds, no microseconds.
    assert re.fullmatch(
        rf"{current}, week to date until \d{{4}}-\d\d-\d\d \d\d:\d\d UTC", body["title"]
    )
    html = (out / f"cost-report-{current}.html").read_text()
    assert re.search(r"\d\d:\d\d:\d\d\.\d+", html.split("</head>")[0]) is None
    assert [p.name for p in tmp_path.iterdir()] == ["reports"]


def test_a_week_without_data_is_refused_and_nothing_is_stored(week, tmp_path: Path) -> None:
    before = report_store.list_reports(week.engine, "weekly", 100)
    done = _cli(week, tmp_path, "--week", EMPTY, "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert f"no data recorded for {EMPTY}" in done.stderr
    assert "2026-09-28T00:00:00Z" in done.stderr  # the window it looked at
    assert not (tmp_path / "out").exists()
    with pytest.raises(EmptyReport):
        _job(week).generate(EMPTY, WEEK.end)
    assert report_store.list_reports(week.engine, "weekly", 100) == before
    # The scheduled job skips such a week instead of storing and announcing zeros.
    assert _job(week)(datetime(2026, 10, 5, 9, tzinfo=UTC)) is None
    api = api_for(week, cost_model="worked")
    api.clock.now = WEEK.end + timedelta(days=60)
    refused = api.request("POST", "/api/v1/reports/weekly", params={"week": EMPTY})
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "no_data"
    assert report_store.list_reports(week.engine, "weekly", 100) == before


def test_the_api_reports_this_week_with_partial_and_no_week(week) -> None:
    api = api_for(week, cost_model="worked")
    api.clock.now = WEEK.start + timedelta(days=3, hours=12)
    made = api.request("POST", "/api/v1/reports/weekly", params={"partial": "true"})
    assert made.status_code == 200, made.text
    assert made.json()["period"] == PERIOD
    assert made.json()["partial"] is True


def test_an_empty_purchasing_hint_without_a_command_says_no_next(week) -> None:
    body = _job(week).generate(PERIOD, WEEK.end).body
    body["purchasing"] = {
        **body["purchasing"],
        "empty": {"text": "No GPU data yet.", "next_command": None},
    }
    html = render_html(body)
    assert "No GPU data yet." in html
    assert "Next: " not in html.split('id="purchasing"')[1].split("<h2>")[0]
    assert "None" not in html


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Chromium")
def test_the_html_shows_whole_tables_and_labels_in_chromium(week, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    body = _job(week).generate(PERIOD, WEEK.end).body
    # A model id as long as real ones get, in the tables and in the per-model chart.
    for group in body["by_model"]["groups"]:
        group["labels"]["model"] = LONG_MODEL + "-" + group["labels"]["model"]
    page_file = tmp_path / "report.html"
    page_file.write_text(render_html(body), encoding="utf-8")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(page_file.as_uri())
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
            # Every table is whole at 1,280 px: no column hidden behind a scroll.
            cut = page.evaluate(
                """() => [...document.querySelectorAll('.scroll')]
                    .filter(d => d.scrollWidth > d.clientWidth + 1)
                    .map(d => d.querySelector('table').dataset.section
                         || d.querySelector('table').dataset.purchasing)"""
            )
            assert cut == []
            # Every chart label lies inside its chart (none cut at the left edge).
            outside = page.evaluate(
                """() => [...document.querySelectorAll('svg text.label')].filter(t => {
                    const s = t.ownerSVGElement.getBoundingClientRect();
                    const b = t.getBoundingClientRect();
                    return b.left < s.left - 0.5 || b.right > s.right + 0.5;
                }).map(t => t.textContent)"""
            )
            assert outside == []
            labels = page.evaluate(
                "() => [...document.querySelectorAll('#chart-cost-per-million text.label')]"
                ".map(t => t.querySelector('title').textContent)"
            )
            assert all(label.startswith(LONG_MODEL) for label in labels)
        finally:
            browser.close()
