"""``infersight profile INSTANCE``: a profile of an instance's serving process, by hand.

Asks the store for a profile (``service.profiles.request_profile``: the same bounds as the
API's), waits while the instance's sidecar claims it and samples (progress on stderr), then
prints what it found: the host-side limits' shares and the hottest frames, folded by module
and function (``--json``: the stored profile). Exit 1 when no profile could be taken (the
reason is printed: "not permitted: …"), 2 for bad input or a profile already open.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import click

from infersight.core.profile import (
    DEFAULT_RATE,
    MAX_RATE,
    MAX_SECONDS,
    MIN_RATE,
    MIN_SECONDS,
    ranked_shares,
    summary_header,
    summary_rows,
)

#: Seconds the command waits beyond the profile's own for a sidecar to claim and return it.
CLAIM_WAIT_S = 60.0
_BAR = 30


def render(profile: dict[str, Any]) -> str:
    """The human-readable form of a stored profile."""
    lines = [f"profile {profile['id']} of {profile['instance']}: {profile['state']}"]
    result = profile.get("result")
    if not isinstance(result, dict):
        lines.append(f"no profile: {profile.get('error') or 'none yet'}")
        return "\n".join(lines)
    run = summary_header(result)
    lines.append(
        f"{run['busy_samples']} busy of {run['samples']} thread-samples ({run['threads']} "
        f"threads, {run['rate']} Hz for {run['seconds']} s"
        f"{', native frames' if run['native'] else ''})"
    )
    for name, share in ranked_shares(result.get("shares")):
        lines.append(f"  {name:<10} {share * 100:5.1f} %")
    measured = result.get("measured")
    missing = {"gil", "lock"} - (
        {str(m) for m in measured} if isinstance(measured, list) else set()
    )
    if missing:
        lines.append(f"  (not measured without native frames: {', '.join(sorted(missing))})")
    for title, key in (("hottest functions", "self"), ("by module", "modules")):
        lines.append(f"{title} (share of busy samples where they run):")
        for row in summary_rows(result.get(key), 15):
            share = row["share"]
            bar = "█" * max(1, round(share * _BAR)) if share > 0 else ""
            lines.append(f"  {share * 100:5.1f} % {bar:<{_BAR}} {row.get('frame')}")
    return "\n".join(lines)


@click.command("profile")
@click.argument("instance")
@click.option(
    "--seconds",
    default=5.0,
    show_default=True,
    type=click.FloatRange(MIN_SECONDS, MAX_SECONDS),
    help="How long to sample (the sidecar caps it to its --profile-max-seconds).",
)
@click.option(
    "--rate",
    default=DEFAULT_RATE,
    show_default=True,
    type=click.IntRange(MIN_RATE, MAX_RATE),
    help="Samples per second (the sidecar caps it to its --profile-rate).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the stored profile as JSON.")
@click.option("--no-wait", is_flag=True, help="Request it and print its id; do not wait.")
@click.pass_context
def profile(
    ctx: click.Context, instance: str, seconds: float, rate: int, as_json: bool, no_wait: bool
) -> None:
    """Sample INSTANCE's serving process (through its sidecar) and show where its CPU goes."""
    from infersight.cli.group import open_store  # noqa: PLC0415
    from infersight.service.admin import migrate  # noqa: PLC0415
    from infersight.service.profiles import (  # noqa: PLC0415
        PENDING_AFTER,
        get_profile,
        request_profile,
    )

    store = open_store(ctx)
    try:
        migrate(store)
        asked = request_profile(
            store, instance, datetime.now(UTC), seconds=seconds, rate=rate, requested_by="cli"
        )
        if no_wait:
            click.echo(json.dumps(asked.to_dict()) if as_json else f"profile {asked.id} requested")
            return
        click.echo(f"profile {asked.id} of {instance} requested", err=True)
        deadline = time.monotonic() + seconds + CLAIM_WAIT_S
        shown = ""
        while True:
            current = get_profile(store, asked.id, datetime.now(UTC))
            if not current.open:
                break
            if current.claimed_at is None:
                status = "waiting for the sidecar of " + instance
            else:
                ran = (datetime.now(UTC) - current.claimed_at).total_seconds()
                status = f"sampling: {min(ran, current.seconds):.0f} of {current.seconds:.0f} s"
            if status != shown:
                click.echo(status, err=True)
                shown = status
            if time.monotonic() > deadline:
                raise click.ClickException(
                    f"no answer from the sidecar of {instance} (is it running with "
                    f"--profile-target?); the request stays pending until a sidecar takes it or "
                    f"it fails after {PENDING_AFTER.total_seconds() / 60:g} min (cancel "
                    f"it: DELETE /api/v1/profiles/{asked.id})"
                )
            time.sleep(0.5)
        out = current.to_dict()
        click.echo(json.dumps(out, indent=2) if as_json else render(out))
        if current.result is None:
            ctx.exit(1)
    finally:
        store.dispose()
