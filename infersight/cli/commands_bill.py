"""``infersight cost import-bill | reconcile | use-billed-price | bills``: the cloud bill.

``import-bill FILE`` imports a FOCUS export (CSV, gzip CSV or Parquet) all or nothing,
mapping its lines to instances by ``--key`` (repeatable: ``tag:KEY``, ``ResourceName``,
``ResourceId``) or a ``--mapping`` BillMapping document. ``reconcile`` prints billed vs
modelled cost per day and instance, the drift, the unmatched lines and the effective price
per GPU-hour (``--json``: the API's answer). ``use-billed-price`` writes the effective prices
into the cost model in use as per-instance prices, a new version of it in the store (what
``cost apply`` writes); ``--dry-run`` prints the document instead. (``service.reconcile``.)
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from infersight.cli.group import EXIT_USAGE, current_settings, open_store, read_spec_file
from infersight.core.errors import InvalidInput
from infersight.core.focus import DEFAULT_KEYS, FOCUS_VERSION, BillMapping
from infersight.core.timestamps import parse_time
from infersight.core.window import Window, parse_duration
from infersight.service import reconcile as rec
from infersight.service.admin import migrate
from infersight.service.cost_spec import active_model, to_document


def _window(start: str | None, end: str | None, last: str) -> Window:
    end_ts = parse_time("end", end) if end else datetime.now(UTC)
    start_ts = parse_time("start", start) if start else end_ts - parse_duration(last)
    return Window(start_ts, end_ts)


def _refused(error: InvalidInput) -> None:
    """A refused import: every problem on a line of its own."""
    click.echo(f"error: {error.message}", err=True)
    for problem in error.details.get("errors", []):
        value = f" (value {problem['value']!r})" if "value" in problem else ""
        column = f", column {problem['column']}" if problem.get("column") else ""
        click.echo(f"  row {problem['row']}{column}: {problem['problem']}{value}", err=True)
    sys.exit(EXIT_USAGE)


@click.command("import-bill")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--key",
    "keys",
    multiple=True,
    help="Where a line names its instance, tried in order: tag:KEY, ResourceName or "
    f"ResourceId (default: {', '.join(DEFAULT_KEYS)}).",
)
@click.option(
    "--mapping",
    "mapping_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A BillMapping document (keys and aliases) instead of --key.",
)
@click.option("--max-rows", default=rec.MAX_ROWS, show_default=True, type=click.IntRange(1))
@click.option("--json", "as_json", is_flag=True, help="Print the import as JSON.")
@click.pass_context
def import_bill(
    ctx: click.Context,
    file: Path,
    keys: tuple[str, ...],
    mapping_file: Path | None,
    max_rows: int,
    as_json: bool,
) -> None:
    """Import a cloud bill: a FOCUS export FILE (CSV, .csv.gz or Parquet)."""
    if keys and mapping_file:
        raise click.UsageError("give --key or --mapping, not both")
    if mapping_file is not None:
        mapping = read_spec_file(mapping_file, rec.parse_mapping)
    else:
        mapping = BillMapping(keys) if keys else BillMapping()
    store = open_store(ctx)
    try:
        migrate(store)
        try:
            imported = rec.import_path(store, file, mapping, datetime.now(UTC), max_rows=max_rows)
        except InvalidInput as error:
            if "errors" in error.details:
                _refused(error)
            raise
    finally:
        store.dispose()
    body = imported.as_dict()
    if as_json:
        click.echo(json.dumps(body, indent=2))
        return
    click.echo(
        f"imported {file.name} (import {body['id']}, {body['format']}, FOCUS {FOCUS_VERSION}): "
        f"{body['rows']} lines, {body['start']} → {body['end']}, billed {body['billed']} "
        f"{body['currency']}"
    )
    for category, total in body["by_category"].items():
        click.echo(f"  {category}: {total}")
    click.echo(f"  instances named: {', '.join(body['instances']) or '(none)'}")
    if body["unmapped_usage_rows"]:
        click.echo(
            f"  {body['unmapped_usage_rows']} usage line(s) name no instance "
            f"(keys: {', '.join(mapping.keys)})"
        )


def _window_options(command: Any) -> Any:
    for option in reversed(
        [
            click.option("--start", default=None, help="RFC 3339 or Unix seconds."),
            click.option("--end", default=None, help="RFC 3339 or Unix seconds (default: now)."),
            click.option("--last", default="7d", show_default=True, help="Without --start."),
            click.option(
                "--basis",
                type=click.Choice(rec.BASES),
                default="billed",
                show_default=True,
                help="BilledCost (the invoice) or EffectiveCost (amortised).",
            ),
        ]
    ):
        command = option(command)
    return command


@click.command("reconcile")
@_window_options
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON instead.")
@click.pass_context
def reconcile(
    ctx: click.Context, start: str | None, end: str | None, last: str, basis: str, as_json: bool
) -> None:
    """Billed vs modelled cost per day and instance, the drift and the unmatched lines."""
    window = _window(start, end, last)
    settings = current_settings(ctx)
    store = open_store(ctx)
    try:
        result = rec.reconcile(
            store,
            active_model(store, settings.cost_model),
            window.start,
            window.end,
            basis=basis,
            finest_for=lambda w: settings.retention().finest_for(w, window.end),
        )
    finally:
        store.dispose()
    body = result.as_dict()
    if as_json:
        click.echo(json.dumps(body, indent=2))
        return
    _print(body)


def _table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        cells = [r[0].ljust(widths[0]), r[1].ljust(widths[1])] + [
            c.rjust(w) for c, w in zip(r[2:], widths[2:], strict=True)
        ]
        click.echo(" ".join(cells).rstrip())


def _print(body: dict[str, Any]) -> None:
    currency = body["currency"]
    click.echo(f"{body['start']} → {body['end']}, {currency}, {body['basis']} cost")
    click.echo(body["summary"])
    if not body["reconciled"]:
        return
    header = ("DATE", "INSTANCE", "BILLED", "MODELLED", "DRIFT", "DRIFT %", "GPU-H", "PER GPU-H")
    rows: list[tuple[str, ...]] = [header]
    for d in [*body["days"], *({**i, "date": "TOTAL"} for i in body["instances"])]:
        rows.append(
            (
                d["date"],
                d["instance"],
                d["billed"],
                d["modelled"],
                d["drift"],
                d["drift_pct"] or "-",
                d["gpu_hours"],
                d["billed_per_gpu_hour"] or "-",
            )
        )
    _table(rows)
    for i in body["instances"]:
        typed = i["typed_price_per_gpu_hour"]
        if typed is not None and i["billed_per_gpu_hour"] is not None:
            click.echo(
                f"{i['instance']}: the bill implies {i['billed_per_gpu_hour']} {currency} per "
                f"GPU-hour; the cost model says {typed} "
                "(infersight cost use-billed-price replaces it)"
            )
    unmatched = body["unmatched"]
    for u in unmatched["billed_not_seen"]:
        click.echo(
            f"billed, not seen: {u['date']} {u['resource']} {u['billed']} {currency} "
            f"({u['bill_lines']} line(s): {u['reason']})"
        )
    for u in unmatched["seen_not_billed"]:
        click.echo(f"seen, not billed: {u['date']} {u['instance']} modelled {u['modelled']}")
    for category, total in body["other_charges"].items():
        click.echo(f"not compared: {category} {total}")


@click.command("use-billed-price")
@_window_options
@click.option("--instance", "instances", multiple=True, help="Only these instances.")
@click.option("--dry-run", is_flag=True, help="Print the new cost model; store nothing.")
@click.pass_context
def use_billed_price(
    ctx: click.Context,
    start: str | None,
    end: str | None,
    last: str,
    basis: str,
    instances: tuple[str, ...],
    dry_run: bool,
) -> None:
    """Replace the typed-in price of reconciled instances with the price the bill implies."""
    import yaml  # noqa: PLC0415 (only to print the document)

    window = _window(start, end, last)
    settings = current_settings(ctx)
    store = open_store(ctx)
    try:
        model, prices = rec.use_billed_price(
            store,
            active_model(store, settings.cost_model),
            window.start,
            window.end,
            datetime.now(UTC),
            instances=instances or None,
            basis=basis,
            dry_run=dry_run,
        )
    finally:
        store.dispose()
    for name, price in sorted(prices.items()):
        click.echo(f"{name}: {price} {model.currency} per GPU-hour (from the bill)", err=True)
    if dry_run:
        click.echo(yaml.safe_dump(to_document(model), sort_keys=False), nl=False)
    else:
        click.echo(f"updated {model.name} ({len(prices)} instance price(s))", err=True)


@click.command("bills")
@click.pass_context
def list_bills(ctx: click.Context) -> None:
    """List imported cloud bills, newest first."""
    store = open_store(ctx)
    try:
        imports = rec.list_imports(store)
    finally:
        store.dispose()
    for i in imports:
        click.echo(
            f"{i.id}\t{i.name}\t{i.format}\t{i.rows} lines\t{i.period_start:%Y-%m-%d} → "
            f"{i.period_end:%Y-%m-%d}\t{rec.amount_text(i.billed)} {i.currency}"
        )


COMMANDS = (import_bill, reconcile, use_billed_price, list_bills)
