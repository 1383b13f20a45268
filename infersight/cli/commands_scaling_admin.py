"""``infersight scaling apply|list|show``: ScalingPolicy documents and the recommender's newest
recommendations from the command line.

``apply FILE…`` stores the ``kind: ScalingPolicy`` documents (YAML, several per file, or JSON);
``list`` prints every stored policy and every model's newest recommendation; ``show MODEL``
the model's policy in force and its newest recommendation with its reason and staleness.
(``scaling backtest`` is ``infersight.cli.commands_scaling``'s; ``register`` adds these there.)
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import click


@click.group("scaling")
def scaling() -> None:
    """Replica recommendations: scaling policies, the newest recommendation per model."""


@click.command("apply")
@click.argument(
    "files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.pass_context
def apply(ctx: click.Context, files: tuple[Path, ...]) -> None:
    """Create or replace the ScalingPolicy documents in FILES (YAML or JSON), all or nothing."""
    from infersight.cli.commands_apply import apply_files  # noqa: PLC0415
    from infersight.service.scaling_spec import SCALING_POLICY  # noqa: PLC0415

    for applied in apply_files(ctx, files, [SCALING_POLICY]).applied:
        click.echo(f"{applied.said()} {applied.document.name}")


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """Every scaling policy, and every model's newest recommendation."""
    from infersight.cli.group import open_store  # noqa: PLC0415
    from infersight.service.scaling import current, policies  # noqa: PLC0415
    from infersight.service.scaling_spec import to_document  # noqa: PLC0415

    store = open_store(ctx)
    try:
        stored = policies(store)
        found = current(store, datetime.now(UTC))
    finally:
        store.dispose()
    if as_json:
        body = {
            "policies": [to_document(p) for p in stored],
            "models": [c.to_dict() for c in found],
        }
        click.echo(json.dumps(body, indent=2))
        return
    click.echo(f"{'POLICY':<24} {'MODEL':<32} {'MIN':>4} {'MAX':>4} {'LEAD_S':>7}")
    for p in stored:
        model = p.model or "(every other model)"
        click.echo(
            f"{p.name:<24} {model:<32} {p.min_replicas:>4} {p.max_replicas:>4} {p.lead_time_s:>7g}"
        )
    click.echo()
    click.echo(
        f"{'MODEL':<32} {'POOL':<8} {'OBSERVED':>8} {'DESIRED':>7} {'AGE_S':>6} "
        f"{'DRIVER':<14} USABLE"
    )
    for c in found:
        rec = c.recommendation
        click.echo(
            f"{rec.model:<32} {rec.pool or '-':<8} {rec.observed:>8} {rec.desired:>7} "
            f"{c.age_s:>6.0f} "
            f"{rec.driver:<14} {'yes' if c.usable else 'no: ' + (c.refusal or '')}"
        )


@click.command("show")
@click.argument("model")
@click.option(
    "--pool",
    type=click.Choice(["prefill", "decode"]),
    default=None,
    help="The pool of a disaggregated model (required for one).",
)
@click.pass_context
def show(ctx: click.Context, model: str, pool: str | None) -> None:
    """MODEL's policy in force and its newest recommendation (JSON)."""
    from infersight.cli.group import open_store  # noqa: PLC0415
    from infersight.service.scaling import choose_policy, current_for, policies  # noqa: PLC0415
    from infersight.service.scaling_spec import to_document  # noqa: PLC0415

    store = open_store(ctx)
    try:
        policy = choose_policy(policies(store), model)
        body = {"policy": to_document(policy)}
        body["recommendation"] = current_for(store, model, datetime.now(UTC), pool).to_dict()
    finally:
        store.dispose()
    click.echo(json.dumps(body, indent=2))


def register(group: click.Group) -> None:
    """Add ``apply``, ``list`` and ``show`` to ``group`` (``infersight scaling``)."""
    for command in (apply, list_, show):
        group.add_command(command)


register(scaling)
