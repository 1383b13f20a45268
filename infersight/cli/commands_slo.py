"""``infersight slo apply|list|export-rules``: SLO definitions from the command line.

``apply FILE…`` reads infersight/v1 or OpenSLO v1 documents (YAML, several per file, or JSON)
and stores them; ``list`` prints every SLO with its current SLI, budget and alert state;
``export-rules`` writes Prometheus recording and alerting rules for the stored SLOs (or those
in the files given) under the burn-rate policy infersight itself evaluates.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import click

from infersight.cli.group import open_store, read_spec_file, store_settings
from infersight.core.errors import SchemaMissing

# Each command imports what it uses (``list`` needs neither Alembic nor the rule exporter, nor
# pydantic: neither the settings nor the spec parser, ``tests/test_cli.py``).

_DURATION = r"^[0-9]+(ms|s|m|h|d)$"


@click.group("slo")
def slo() -> None:
    """Service level objectives: apply definitions, list them with their status."""


@slo.command("apply")
@click.argument(
    "files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.pass_context
def apply(ctx: click.Context, files: tuple[Path, ...]) -> None:
    """Create or replace the SLOs defined in FILES (YAML or JSON), all or nothing."""
    from infersight.cli.commands_apply import apply_files  # noqa: PLC0415
    from infersight.service.specs import SLO  # noqa: PLC0415

    for applied in apply_files(ctx, files, [SLO]).applied:
        click.echo(f"{applied.said()} {applied.document.name}")
        for note in applied.notes:  # a per-token goodput SLO (service.apply.OUTPUT_TOKENS_NOTE)
            click.echo(note, err=True)


@slo.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """Every SLO with its SLI, error budget remaining and firing severity now."""
    from infersight.core.slo import GoodputUnit, targets_text  # noqa: PLC0415
    from infersight.service.evaluation import default_policy  # noqa: PLC0415
    from infersight.service.slo_documents import to_document  # noqa: PLC0415 (no pydantic, unlike specs)
    from infersight.service.slos import statuses  # noqa: PLC0415

    settings = store_settings(ctx)
    store = open_store(ctx, light=True)
    try:
        now = datetime.now(UTC)
        found = statuses(
            store, default_policy(), now, settings.retention().finest_for, cached=False
        )
        rows = [{**to_document(s.spec), "status": s.to_dict()} for s in found]
        slis = [s.spec.sli for s in found]
    finally:
        store.dispose()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(
        f"{'NAME':<28} {'SLI':<22} {'OBJECTIVE':>9} {'WINDOW':>6} {'NOW':>9} {'BUDGET':>7}  FIRING"
    )
    for row, sli_of in zip(rows, slis, strict=True):
        spec, state = row["spec"], row["status"]
        sli = next(iter(spec["sli"]))
        if sli == "latency":
            sli = f"{spec['sli']['latency']['metric']}≤{spec['sli']['latency']['threshold']}"
        elif sli == "goodput":  # its targets together; "/token" when it counts output tokens
            sli = f"goodput {targets_text(sli_of, compact=True)}"
            sli += "/token" if sli_of.per is GoodputUnit.TOKEN else ""
        value = "-" if state["sli"] is None else f"{state['sli']:.4%}"
        click.echo(
            f"{row['metadata']['name']:<28} {sli:<22} {spec['objective']:>9.4%} "
            f"{spec['window']:>6} {value:>9} {state['error_budget_remaining']:>7.1%}  "
            f"{state['firing'] or '-'}"
        )


@slo.command("export-rules")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Write the rule file here instead of standard output.",
)
@click.option(
    "--interval",
    default=None,
    metavar="DURATION",
    help="Evaluation interval of the rule groups (default: Prometheus's global one).",
)
@click.pass_context
def export_rules(
    ctx: click.Context, files: tuple[Path, ...], output: Path | None, interval: str | None
) -> None:
    """Prometheus recording and alerting rules for the SLOs in FILES (default: the store's).

    The rules read the API's /metrics (infersight_slo_window_events and
    infersight_slo_window_bad_events) and fire as infersight's own burn-rate alerts do.
    """
    from infersight.alerts.prometheus_rules import rule_groups, to_yaml  # noqa: PLC0415
    from infersight.service.admin import current_revision  # noqa: PLC0415 (without Alembic)
    from infersight.service.evaluation import default_policy  # noqa: PLC0415
    from infersight.service.slos import list_slos  # noqa: PLC0415
    from infersight.service.specs import parse_specs  # noqa: PLC0415

    if interval is not None and not re.fullmatch(_DURATION, interval):
        raise click.BadParameter(f"expected a duration such as 30s or 1m, got {interval!r}")
    if files:
        specs = [spec for path in files for spec in read_spec_file(path, parse_specs)]
    else:
        store = open_store(ctx, light=True)
        try:
            if current_revision(store) is None:
                raise SchemaMissing(
                    f"the store at {store.describe()} has no schema: run `infersight db upgrade`"
                )
            specs = list_slos(store)
        finally:
            store.dispose()
    if not specs:
        raise click.ClickException("no SLOs to export: apply some first, or name spec files")
    text = "# Generated by `infersight slo export-rules`; see alerts/prometheus_rules.py.\n"
    text += to_yaml(rule_groups(specs, default_policy(), interval))
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)
        click.echo(f"wrote {len(specs)} SLOs' rules to {output}", err=True)
