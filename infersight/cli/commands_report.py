"""``infersight report weekly [--week 2026-W48 | --partial] [--out DIR]``: a weekly cost report
on demand.

Generates the report the service's Monday job would (``service.reports``) and stores it, so the
API and ``GET /api/v1/reports`` list it. Without ``--week`` it reports the week that ended last,
or with ``--partial`` the week in progress to date. A week with no data at all is refused (exit
status 2) and nothing is stored. Files are written only where ``--out DIR`` says:
``cost-report-WEEK.html``, ``.csv`` and ``.json``; without it the command names the stored
report and writes nothing (never silently into the current directory).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import click

from infersight.cli.group import current_settings, open_store
from infersight.service.admin import migrate
from infersight.service.cost_spec import active_model
from infersight.service.reports import WeeklyReports, default_week, zone


@click.group("report")
def report() -> None:
    """Cost reports."""


@report.command("weekly")
@click.option(
    "--week",
    default=None,
    metavar="YYYY-Www",
    help="ISO week (default: the last week that ended; with --partial, the week in progress).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write the report's HTML, CSV and JSON into this directory (created if missing); "
    "without it nothing is written, the report is only stored.",
)
@click.option(
    "--timezone", default=None, help="IANA time zone (default INFERSIGHT_REPORT_TIMEZONE)."
)
@click.option(
    "--partial",
    is_flag=True,
    help="Report a week that has not ended to date (until now); without --week, this week.",
)
@click.pass_context
def weekly(
    ctx: click.Context, week: str | None, out: Path | None, timezone: str | None, partial: bool
) -> None:
    """Generate and store the cost report of one ISO week; --out DIR also writes its files.

    A week with no data in the store (no requests, no GPU samples) is refused with the window
    it looked at, and nothing is stored or written.
    """
    settings = current_settings(ctx)
    tz_name = timezone or settings.report_timezone
    now = datetime.now(UTC)
    period = week or default_week(now, zone(tz_name), partial=partial)
    store = open_store(ctx)
    try:
        migrate(store)
        jobs = WeeklyReports(
            store,
            lambda: active_model(store, settings.cost_model),
            tz_name,
            settings.retention().finest_for,
            attribution_top_n=settings.attribution_top_n,
        )
        generated = jobs.generate(period, now, partial=partial)
    finally:
        store.dispose()
    summary, title = generated.body["summary"], generated.body["title"]
    click.echo(
        f"stored report {generated.id} for {title}: {summary['cost']} {generated.body['currency']}"
    )
    if out is None:
        click.echo(
            f"  see it with GET /api/v1/reports/{generated.id}/html, or add --out DIR to write "
            "its HTML, CSV and JSON"
        )
        return
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"cost-report-{period}"
    paths = {
        "html": stem.with_suffix(".html"),
        "csv": stem.with_suffix(".csv"),
        "json": stem.with_suffix(".json"),
    }
    paths["html"].write_text(generated.html, encoding="utf-8")
    paths["csv"].write_text(generated.csv, encoding="utf-8")
    paths["json"].write_text(json.dumps(generated.body, indent=2, sort_keys=True), encoding="utf-8")
    for path in paths.values():
        click.echo(f"  wrote {path}")
