"""``infersight cost apply|show|model``: cost models and unit costs from the command line.

``apply FILE…`` stores CostModel documents (``apiVersion: infersight/v1``); the service prices
GPU time with the one named by ``INFERSIGHT_COST_MODEL``. ``show`` prints cost, cost per
million tokens (total / input / output / good), tokens per joule, utilisation and idle cost
for a window, grouped as asked, as a table or the API's JSON.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from infersight.cli.group import current_settings, open_store
from infersight.cli.lazy import lazy_module
from infersight.core.query import Selector, check_group_by
from infersight.core.timestamps import parse_time
from infersight.core.window import Window, parse_duration
from infersight.service import cost_view
from infersight.service.cost_spec import active_model, to_document
from infersight.service.cost_view import cost_dict

if TYPE_CHECKING:
    import yaml
else:  # imported when used: ``cost show`` needs no yaml
    yaml = lazy_module("yaml")


@click.group("cost")
def cost() -> None:
    """Cost models and cost per million tokens."""


@cost.command("apply")
@click.argument(
    "files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.pass_context
def apply(ctx: click.Context, files: tuple[Path, ...]) -> None:
    """Create or replace the cost models defined in FILES (YAML or JSON), all or nothing."""
    from infersight.cli.commands_apply import apply_files  # noqa: PLC0415
    from infersight.service.cost_spec import COST_MODEL  # noqa: PLC0415

    for applied in apply_files(ctx, files, [COST_MODEL]).applied:
        used = " (in use)" if applied.in_use else ""
        click.echo(f"{applied.said()} {applied.document.name}{used}")


@cost.command("model")
@click.pass_context
def model(ctx: click.Context) -> None:
    """Print the cost model in use as a CostModel document."""
    settings = current_settings(ctx)
    store = open_store(ctx)
    try:
        document = to_document(active_model(store, settings.cost_model))
    finally:
        store.dispose()
    click.echo(yaml.safe_dump(document, sort_keys=False), nl=False)


@cost.command("show")
@click.option("--start", default=None, help="RFC 3339 or Unix seconds (default: end − --last).")
@click.option("--end", default=None, help="RFC 3339 or Unix seconds (default: now).")
@click.option("--last", default="1d", show_default=True, help="Window length when no --start.")
@click.option(
    "--group-by", default="model", show_default=True, help="model,instance,tenant,priority"
)
@click.option("--model", "model_name", default=None, help="Only this model.")
@click.option("--instance", default=None, help="Only this instance.")
@click.option("--tenant", default=None, help="Only this tenant.")
@click.option("--priority", default=None, help="Only this priority.")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON instead of a table.")
@click.pass_context
def show(
    ctx: click.Context,
    start: str | None,
    end: str | None,
    last: str,
    group_by: str,
    model_name: str | None,
    instance: str | None,
    tenant: str | None,
    priority: str | None,
    as_json: bool,
) -> None:
    """Cost and unit costs over a window, per group."""
    end_ts = parse_time("end", end) if end else datetime.now(UTC)
    start_ts = parse_time("start", start) if start else end_ts - parse_duration(last)
    window = Window(start_ts, end_ts)
    groups = check_group_by(p.strip() for p in group_by.split(",") if p.strip())
    selector = Selector(model=model_name, instance=instance, tenant=tenant, priority=priority)
    settings = current_settings(ctx)
    store = open_store(ctx)
    try:
        result = cost_view.cost(
            store,
            window,
            active_model(store, settings.cost_model),
            selector,
            groups,
            finest=settings.retention().finest_for(window, end_ts),
        )
    finally:
        store.dispose()
    body = cost_dict(result)
    if as_json:
        click.echo(json.dumps(body, indent=2))
        return
    _table(body)


def _table(body: dict[str, Any]) -> None:
    currency = body["currency"]
    note = (
        " (EXAMPLE list prices: apply your own cost model)"
        if body["cost_model"]["example_prices"]
        else ""
    )
    click.echo(f"{body['start']} → {body['end']}, {currency}{note}")
    header = (
        "GROUP",
        f"COST {currency}",
        "IDLE",
        "GPU-H",
        "TOKENS",
        f"{currency}/M TOTAL",
        f"{currency}/M IN",
        f"{currency}/M OUT",
        f"{currency}/M GOOD",
        "UTIL",
    )
    table: list[tuple[str, ...]] = [header]
    for row in [*body["groups"], {**body["total"], "labels": {"": "TOTAL"}}]:
        label = ",".join(f"{k}={v}" if k else v for k, v in row["labels"].items()) or "all"
        per = row["cost_per_million_tokens"]
        table.append(
            (
                label,
                _short(row["cost"]),
                _short(row["idle_cost"]),
                _short(row["gpu_hours"], 1),
                str(row["tokens"]),
                *(_unit(per[k]) for k in ("total", "input", "output", "good")),
                "-" if row["utilisation"] is None else f"{row['utilisation']:.0%}",
            )
        )
    # Every column as wide as its widest cell: labels are never cut.
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        click.echo(" ".join(cells).rstrip())
    click.echo(f"good tokens: {body['good_tokens']['text']}")


def _short(value: str | None, places: int = 2) -> str:
    if value is None:
        return "-"
    return f"{float(value):,.{places}f}"


def _unit(value: str | None) -> str:
    """A cost per million tokens to significant digits (0.0042, not 0.00)."""
    # Imported here: the module's import block is shared with concurrent work (#16).
    from infersight.service.cost_view import unit_cost_text  # noqa: PLC0415

    return "-" if value is None else unit_cost_text(value)


# The cloud bill (issue 34): import-bill, reconcile, use-billed-price, bills.
from infersight.cli.commands_bill import COMMANDS as _BILL_COMMANDS  # noqa: E402

for _command in _BILL_COMMANDS:
    cost.add_command(_command)
