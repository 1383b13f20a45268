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

import click
from sqlalchemy import Engine

from infersight.core.query import Method, Selector
from infersight.core.window import Window
from infersight.simulator.fleet import Progress, RunResult
from infersight.simulator.scenario import Scenario
from infersight.storage import incidents, queries, signals

QUANTILES = (0.5, 0.9, 0.99)


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


def report(engine: Engine, scenario: Scenario, result: RunResult) -> None:
    window = Window(scenario.start, scenario.start + timedelta(seconds=scenario.duration_s))
    echo = click.echo
    echo(f"\nWhat infersight saw over {window.start:%Y-%m-%d %H:%M}–{window.end:%H:%M} UTC")
    echo("\nLatency per model (ms; from per-request records, not histogram buckets)")
    rates = {t.labels["model"]: t for t in queries.throughput(engine, window, group_by=["model"])}
    width = max([len("model"), *(len(model) for model in rates)]) + 2
    header = f"  {'model':<{width}}{'requests':>10}{'errors':>8}"
    for metric in ("ttft", "tpot", "e2e"):
        header += "".join(f"{metric.upper() + ' P' + format(q * 100, 'g'):>13}" for q in QUANTILES)
    echo(header)
    answers = {
        metric: {
            g.labels["model"]: g
            for g in queries.latency(
                engine,
                metric,
                window,
                group_by=["model"],
                quantiles=QUANTILES,
                method=Method.SKETCH,
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
    for row in queries.breakdown(engine, window, group_by=["model"]):
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
                groups = queries.latency(
                    engine,
                    metric,
                    span,
                    Selector(instance=fault.instance),
                    quantiles=(0.99,),
                    method=Method.EXACT,
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


def incidents_report(engine: Engine, scenario: Scenario) -> None:
    """The incidents opened over the scenario, oldest first, with their stored diagnoses."""
    start = scenario.start
    found = [i for i in incidents.list_incidents(engine, "all") if i.opened_at >= start]
    found.sort(key=lambda i: (i.opened_at, i.id))
    echo = click.echo
    echo(f"\nIncidents the SLO evaluation opened ({len(found)}), and their diagnoses")
    if not found:
        echo("  none")
        return
    notes = signals.notes(engine, [i.id for i in found])
    for i in found:
        note = notes.get(i.id)
        until = f"{i.resolved_at:%H:%M}" if i.resolved_at else "open"
        echo(
            f"  #{i.id:<4}{i.opened_at:%H:%M}–{until:<6} {i.severity.value:<7}"
            f"peak burn {i.peak_burn_rate:>7,.1f}×  {i.slo} ({i.scope})\n"
            f"        diagnosis: {_cause(note.diagnosis if note else None)}"
        )
