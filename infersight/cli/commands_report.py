"""``infersight report weekly [--week 2026-W48] [--out DIR]``: a weekly cost report on demand.

Generates the report the service's Monday job would (``service.reports``), stores it (so the API
lists it) and writes ``cost-report-WEEK.html``, ``.csv`` and ``.json`` into DIR.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import click

from infersight.cli.group import current_settings
from infersight.service.cost_spec import active_model
from infersight.service.reports import WeeklyReports, previous_week, zone
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine


@click.group("report")
def report() -> None:
    """Cost reports."""


@report.command("weekly")
@click.option("--week", default=None, metavar="YYYY-Www", help="ISO week (default: last week).")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(),
    show_default=True,
    help="Directory the HTML, CSV and JSON files are written to.",
)
@click.option(
    "--timezone", default=None, help="IANA time zone (default INFERSIGHT_REPORT_TIMEZONE)."
)
@click.option(
    "--partial",
    is_flag=True,
    help="Allow the current week: report it to date (until now).",
)
@click.pass_context
def weekly(
    ctx: click.Context, week: str | None, out: Path, timezone: str | None, partial: bool
) -> None:
    """Generate, store and write the cost report of one ISO week.

    A week with no data is still written, with a notice at its top and a warning on stderr.
    """
    settings = current_settings(ctx)
    tz_name = timezone or settings.report_timezone
    now = datetime.now(UTC)
    period = week or previous_week(now, zone(tz_name))
    engine = create_store_engine(settings.database_url)
    try:
        migrate.upgrade(engine)
        jobs = WeeklyReports(
            engine,
            lambda: active_model(engine, settings.cost_model),
            tz_name,
            settings.retention().finest_for,
        )
        generated = jobs.generate(period, now, partial=partial)
    finally:
        engine.dispose()
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
    summary, title = generated.body["summary"], generated.body["title"]
    click.echo(f"report {generated.id} for {title}: {summary['cost']} {generated.body['currency']}")
    if generated.body["notice"]:
        click.echo(f"warning: {generated.body['notice']}", err=True)
    for path in paths.values():
        click.echo(f"  wrote {path}")
