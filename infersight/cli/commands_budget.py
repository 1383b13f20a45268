"""``infersight budget apply|list``: budgets from the command line.

``apply FILE…`` stores Budget documents (``apiVersion: infersight/v1``, ``kind: Budget``); a
budget that differs from its stored version becomes the next version, one that equals it is
left alone. A budget in another currency than the cost model in use is refused. ``list`` prints
every budget in force with its spend so far, the projection to the period's end and its burn
rates, as a table or the API's JSON.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import click

from infersight.cli.group import current_settings, open_store
from infersight.service.budgets import budget_views, to_document
from infersight.service.cost_spec import active_model


@click.group("budget")
def budget() -> None:
    """Budgets: spend per period with burn-rate alerts."""


@budget.command("apply")
@click.argument(
    "files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.pass_context
def apply(ctx: click.Context, files: tuple[Path, ...]) -> None:
    """Store the budgets defined in FILES (YAML or JSON), all or nothing; a changed one gets a
    new version."""
    from infersight.cli.commands_apply import apply_files  # noqa: PLC0415
    from infersight.service.budgets import BUDGET  # noqa: PLC0415

    for applied in apply_files(ctx, files, [BUDGET]).applied:
        click.echo(f"{applied.document.name}: {applied.said()}")


@budget.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON.")
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """Every budget in force: spent, projected, burn rates, alert."""
    settings = current_settings(ctx)
    store = open_store(ctx)
    now = datetime.now(UTC)
    rows = []
    try:
        for view in budget_views(store, active_model(store, settings.cost_model), now):
            b = view.budget
            if view.status is None:
                rows.append({**to_document(b), "version": b.version, "problem": view.problem})
            else:
                rows.append(
                    {**to_document(b), "version": b.version, "status": view.status.to_dict()}
                )
    finally:
        store.dispose()
    if as_json:
        click.echo(json.dumps({"budgets": rows}, indent=2))
        return
    if not rows:
        click.echo("no budgets: apply one with `infersight budget apply FILE`")
        return
    click.echo(
        f"{'NAME':24} {'VER':>3} {'SCOPE':20} {'PERIOD':8} {'AMOUNT':>12} {'SPENT':>12} "
        f"{'PROJECTED':>12} {'BURN':22} ALERT"
    )
    for row in rows:
        spec = row["spec"]
        scope = ",".join(f"{k}={v}" for k, v in spec["scope"].items()) or "fleet"
        found = row.get("status")
        if found is None:
            click.echo(f"{row['metadata']['name']:24} {row['version']:>3} {scope:20} "
                       f"{spec['period']:8} {spec['amount']:>12}  {row['problem']}")  # fmt: skip
            continue
        status = found
        burn = " ".join(f"{w}×{r:.1f}" for w, r in status["burn_rates"].items())
        projected = status["projected"] or "-"
        click.echo(
            f"{row['metadata']['name']:24} {row['version']:>3} {scope:20} {spec['period']:8} "
            f"{_money(status['amount']):>12} {_money(status['spent']):>12} "
            f"{_money(projected):>12} {burn:22} {status['firing'] or '-'}"
        )


def _money(text: str) -> str:
    try:
        return f"{float(text):,.2f}"
    except ValueError:
        return text
