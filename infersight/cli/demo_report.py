"""The virtual-time demo's read-out: what infersight saw in a scenario played into the store.

Latency percentiles and throughput per model, where end-to-end time goes, and for every
injected fault how the affected instance's latency compares with the hour before it; then
the incidents the SLO evaluation opened while the scenario played, with their diagnoses.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import click

from infersight.core.query import Method, Selector
from infersight.core.window import Resolution, Window
from infersight.service.incidents import list_incidents
from infersight.service.telemetry import breakdown, latency, throughput
from infersight.simulator.fleet import Progress, RunResult
from infersight.simulator.scenario import Scenario

if TYPE_CHECKING:
    from infersight.service.store import Store

QUANTILES = (0.5, 0.9, 0.99)
#: The report reads rollups at their finest: the scenario ends now, well within retention.
FINEST = Resolution.MINUTE
#: The most incidents the report lists.
MAX_INCIDENTS = 500


#: Off a terminal (a CI log, a file) the progress is a plain line this often.
LOG_EVERY_S = 10.0


def progress_bar(
    *, tty: bool | None = None, clock: Callable[[], float] = time.monotonic
) -> tuple[Callable[[Progress], None], Callable[[], None]]:
    """On a terminal a bar redrawn in place (``\\r``) once a second; elsewhere a plain line
    every ``LOG_EVERY_S`` seconds and at the end, so that logs hold no carriage returns.
    ``tty``: whether standard error is a terminal (default: ask it)."""
    if tty is None:
        tty = sys.stderr.isatty()
    every = 1.0 if tty else LOG_EVERY_S
    last, drawn = [-float("inf")], [False]

    def report(p: Progress) -> None:
        now = clock()
        if now - last[0] < every and p.virtual_s < p.duration_s:
            return
        last[0] = now
        share = p.virtual_s / p.duration_s if p.duration_s else 1.0
        figures = (
            f"{share:>4.0%}  {timedelta(seconds=int(p.virtual_s))} simulated, "
            f"{p.requests:,} requests"
        )
        if tty:
            bar = "█" * int(share * 30)
            click.echo(f"\r  [{bar:<30}] {figures}", nl=False, err=True)
            drawn[0] = True
        else:
            click.echo(f"  {figures}", err=True)

    def done() -> None:
        if drawn[0]:
            click.echo("", err=True)
            drawn[0] = False

    return report, done


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1000:,.0f}"


def report(store: Store, scenario: Scenario, result: RunResult, exact_max_rows: int) -> None:
    """What infersight saw of the played ``scenario``: latency and throughput per model, where
    end-to-end time goes, and each injected fault's effect (``exact_max_rows``: the settings'
    bound, for the figures read as ``Method.AUTO`` would)."""
    window = Window(scenario.start, scenario.start + timedelta(seconds=scenario.duration_s))
    echo = click.echo
    echo(f"\nWhat infersight saw over {window.start:%Y-%m-%d %H:%M}–{window.end:%H:%M} UTC")
    echo("\nLatency per model (ms; from per-request records, not histogram buckets)")
    rates = {
        t.labels["model"]: t
        for t in throughput(store, window, Selector(), ["model"], finest=FINEST)
    }
    width = max([len("model"), *(len(model) for model in rates)]) + 2
    header = f"  {'model':<{width}}{'requests':>10}{'errors':>8}"
    for metric in ("ttft", "tpot", "e2e"):
        header += "".join(f"{metric.upper() + ' P' + format(q * 100, 'g'):>13}" for q in QUANTILES)
    echo(header)
    answers = {
        metric: {
            g.labels["model"]: g
            for g in latency(
                store,
                metric,
                window,
                Selector(),
                ["model"],
                QUANTILES,
                Method.SKETCH,
                finest=FINEST,
                exact_max_rows=exact_max_rows,
            ).groups
        }
        for metric in ("ttft", "tpot", "e2e")
    }
    for model, rate in sorted(rates.items()):
        line = f"  {model:<{width}}{rate.requests:>10,}{(rate.error_ratio or 0):>8.2%}"
        for metric in ("ttft", "tpot", "e2e"):
            group = answers[metric].get(model)
            line += "".join(
                f"{_ms(group.quantiles.get(q) if group else None):>13}" for q in QUANTILES
            )
        echo(line)
    echo("  (sketch method: every figure within 1 % of the exact percentile)")

    echo("\nWhere end-to-end time goes")
    for row in breakdown(store, window, Selector(), ["model"], finest=FINEST):
        parts = ", ".join(
            f"{s.stage} {s.share:.0%}"
            for s in row.stages
            if s.share is not None and s.share >= 0.005
        )
        echo(f"  {row.labels['model']:<{width}}{parts}")

    faults = [f for f in result.ground_truth if f.start < window.end]
    if faults:
        echo("\nInjected faults, and what the affected instance's TTFT / TPOT P99 did")
        echo(f"  {'fault':<22}{'instance':<14}{'when (UTC)':<14}{'TTFT P99':>18}{'TPOT P99':>18}")
    for fault in faults:
        during = Window(fault.start, min(fault.end, window.end))
        before = Window(max(window.start, fault.start - timedelta(hours=1)), fault.start)
        cells = []
        for metric in ("ttft", "tpot"):
            values = []
            for span in (before, during):
                groups = latency(
                    store,
                    metric,
                    span,
                    Selector(instance=fault.instance),
                    (),
                    (0.99,),
                    Method.EXACT,
                    finest=FINEST,
                    exact_max_rows=exact_max_rows,
                ).groups
                values.append(groups[0].quantiles[0.99] if groups else None)
            cells.append(f"{_ms(values[0])} → {_ms(values[1])}")
        echo(
            f"  {fault.kind:<22}{fault.instance:<14}"
            f"{fault.start:%H:%M}–{fault.end:%H:%M}  {cells[0]:>18}{cells[1]:>18}"
        )


def _cause(diagnosis: object) -> str:
    if not isinstance(diagnosis, dict):
        return "not diagnosed"
    cause = str(diagnosis.get("cause", "unknown"))
    instance = diagnosis.get("instance")
    confidence = diagnosis.get("confidence")
    where = f" on {instance}" if instance else ""
    sure = f" ({confidence:.0%})" if isinstance(confidence, int | float) else ""
    return f"{cause}{where}{sure}"


def incidents_report(store: Store, scenario: Scenario) -> None:
    """The incidents opened over the scenario, oldest first, with their stored diagnoses."""
    start = scenario.start
    found = list_incidents(
        store, "all", MAX_INCIDENTS, keep=lambda incident: incident.opened_at >= start
    )
    found.sort(key=lambda listed: (listed.incident.opened_at, listed.incident.id))
    echo = click.echo
    echo(f"\nIncidents the SLO evaluation opened ({len(found)}), and their diagnoses")
    if not found:
        echo("  none")
        return
    for listed in found:
        i = listed.incident
        until = f"{i.resolved_at:%H:%M}" if i.resolved_at else "open"
        echo(
            f"  #{i.id:<4}{i.opened_at:%H:%M}–{until:<6} {i.severity.value:<7}"
            f"peak burn {i.peak_burn_rate:>7,.1f}×  {i.slo} ({i.scope})\n"
            f"        diagnosis: {_cause(listed.notes['diagnosis'])}"
        )
