"""``infersight demo``: a simulated fleet with incidents, watched live by infersight.

By default everything runs in this one process on the embedded SQLite store: a simulated
fleet of two models × two vLLM-style instances serving in real time, one sidecar per
instance collecting its OTLP spans, ``/metrics`` and GPU metrics, and the API with its jobs
and the dashboard. It backfills some healthy history, applies the demo SLOs, prints the
dashboard's URL, then injects one fault after another (the first a minute in) and reports
incidents as they open, are diagnosed and resolve, until Ctrl-C (or SIGTERM) stops it cleanly.

A demo plays into a store of its own (``cli.demo_store``): a store that already holds requests,
incidents or load-test runs — the demo run before in this directory — is refused with what it
holds, and ``--fresh`` moves a SQLite store aside (renamed with the time, kept) and starts anew,
so the backfill, the ``demo-healthy`` baseline and the incidents announced are this run's own.

``--virtual`` plays a scenario (mixed-incident by default) into its own store,
``./infersight-virtual.db`` unless ``--store`` names one, in virtual time and as fast as the
machine allows, ending now (or at ``--end``); the API's jobs evaluate the SLOs at every minute
of virtual time and diagnose the incidents (``infersight.cli.demo_virtual``). It prints a report
of what infersight saw, incidents and diagnoses included, and how to open the dashboard on it.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import click

from infersight.cli.commands_serve import split_listen
from infersight.cli.demo_live import DemoStatus, LiveDemo, check_listen, shift_faults
from infersight.cli.demo_seed import Seeding
from infersight.cli.demo_store import held, mark_demo_store, move_aside, refuse_held
from infersight.cli.demo_virtual import VIRTUAL_STORE, run_virtual
from infersight.cli.group import Context, pass_context, read_scenario, read_spec_file
from infersight.core.burn import Incident
from infersight.service.admin import migrate, redact
from infersight.service.specs import parse_specs
from infersight.service.store import open_store
from infersight.simulator.scenario import Scenario
from infersight.simulator.specs import parse_duration

VIRTUAL_SCENARIO = "mixed-incident"
#: How often the live demo prints a progress line (incidents are reported as they change).
PROGRESS_EVERY_S = 10.0
_POLL_S = 1.0


def _shipped(name: str) -> Path:
    return Path(str(resources.files("infersight.cli").joinpath(name)))


def _seconds(value: str | None) -> float | None:
    """A duration option in seconds (``InvalidInput``, exit status 2, when it is not one)."""
    return None if value is None else parse_duration(value)


@click.command("demo")
@click.option(
    "--scenario",
    metavar="NAME|FILE",
    default=None,
    help="Scenario to play (default: the live demo fleet; mixed-incident with --virtual).",
)
@click.option(
    "--listen",
    default="127.0.0.1:8080",
    show_default=True,
    metavar="HOST:PORT",
    help="Where the API and dashboard listen (port 0: any free port).",
)
@click.option(
    "--history",
    default="30m",
    show_default=True,
    metavar="DURATION",
    help="Healthy history played into the store before the live fleet starts.",
)
@click.option(
    "--first-fault",
    default="1m",
    show_default=True,
    metavar="DURATION",
    help="When the first injected fault starts; the others keep their spacing.",
)
@click.option(
    "--slos",
    "slo_file",
    default=None,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="SLO specs to apply (default: the demo's own).",
)
@click.option(
    "--duration",
    default=None,
    metavar="DURATION",
    help="Stop after DURATION (live), or play only the first DURATION (--virtual).",
)
@click.option("--virtual", is_flag=True, help="Play the scenario in virtual time and report.")
@click.option(
    "--end",
    default=None,
    metavar="ISO",
    help="With --virtual: when the played scenario ends (default: now).",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="Start from a new store when the SQLite store holds data (a demo run before): the "
    "old file is moved aside, renamed with the time, and kept.",
)
@pass_context
def demo(
    context: Context,
    scenario: str | None,
    listen: str,
    history: str,
    first_fault: str,
    slo_file: Path | None,
    duration: str | None,
    virtual: bool,
    end: str | None,
    fresh: bool,
) -> None:
    """Run a simulated fleet with sidecars, the API and the dashboard, and watch incidents.

    A demo plays into a store of its own: one that already holds requests, incidents or
    load-test runs (a demo run before, in this directory) is refused; --fresh moves a SQLite
    store aside and starts a new one.
    """
    duration_s = _seconds(duration)
    history_s = _seconds(history) or 0.0
    first_s = _seconds(first_fault) or 0.0
    host, port = split_listen(listen)
    if end is not None and not virtual:
        raise click.UsageError("--end is for --virtual (the live demo runs on the wall clock)")
    url = context.settings.database_url
    if virtual and "database_url" not in context.settings.model_fields_set:
        url = VIRTUAL_STORE  # its own file: not the live demo's store
    # The files first: one that does not parse is named (with its line) before the store is
    # created or migrated.
    slos = read_spec_file(slo_file or _shipped("demo_slos.yaml"), parse_specs)
    plan = read_scenario(scenario or (VIRTUAL_SCENARIO if virtual else _shipped("demo_fleet.yaml")))
    if not virtual:
        check_listen(host, port)  # a demo running there: nothing is moved or played
    _own_store(url, fresh)
    store = open_store(url, pool_size=10, max_overflow=20)
    try:
        click.echo(f"store: {redact(url)}", err=True)
        migrate(store)
        mark_demo_store(store)  # the demo's own store: a later --fresh may move it aside
        if virtual:
            run_virtual(store, context.settings, plan, slos, url, duration_s, end)
            return
        plan = shift_faults(plan, first_s)
        # A fresh seed per run: a second demo on the same store must not repeat trace ids.
        plan = dataclasses.replace(plan, seed=(plan.seed + time.time_ns()) % (1 << 31))
        demo_ = LiveDemo(store, context.settings, plan, slos, host=host, port=port)
        _live(demo_, history_s, duration_s)
    finally:
        store.dispose()


def _own_store(url: str, fresh: bool) -> None:
    """Refuse a store that holds data, or with ``fresh`` move a SQLite one a demo created
    aside (said; ``demo_store.move_aside`` refuses any other, and one in use)."""
    store = open_store(url)
    try:
        what = held(store)
    finally:
        store.dispose()
    if what.empty:
        return
    if not fresh:
        raise refuse_held(url, what)
    aside = move_aside(url, datetime.now(UTC))
    click.echo(
        f"moved the previous store ({what.describe()}) aside to {aside}; this demo starts with "
        f"a new one (look at the old one with infersight --store sqlite:///{aside} serve)",
        err=True,
    )


# -- live ----------------------------------------------------------------------------------


@contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM (the previous handlers come back afterwards)."""
    stop = threading.Event()

    def handler(_signum: int, _frame: Any) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _live(demo_: LiveDemo, history_s: float, duration_s: float | None) -> None:
    demo_.check_listen()
    with _stop_on_signals() as stop:
        click.echo(f"applied SLOs: {', '.join(demo_.apply_slos())}", err=True)
        if history_s > 0:  # the store is the demo's own (_own_store): nothing to mix with
            click.echo(
                f"backfilling {timedelta(seconds=int(history_s))} of healthy history…", err=True
            )
            written = demo_.backfill(history_s, stop)
            click.echo(f"  {written:,} requests stored", err=True)
        if stop.is_set():
            return
        # The healthy history backfilled is the baseline.
        history = demo_.history_window(history_s) if history_s > 0 else None
        seeding: Seeding | None = None
        try:
            _introduce(demo_.scenario, demo_.start())
            first_incident = threading.Event()
            echo = lambda t: click.echo(t, err=True)  # noqa: E731
            seeding = Seeding(demo_.store, history, echo, go=first_incident).start()
            _watch(demo_, stop, duration_s, first_incident)
        finally:
            click.echo("stopping: fleet, sidecars (draining their spools), API…", err=True)
            if seeding is not None:
                seeding.stop()
            demo_.stop()
    leftover = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if leftover:
        # Every part joins its threads on stop; name any that did not, rather than hide it.
        click.echo(f"warning: threads still running: {', '.join(sorted(leftover))}", err=True)
    click.echo("demo stopped", err=True)


def _introduce(plan: Scenario, url: str) -> None:
    """The URL on stdout (for people and scripts), what runs and what will break on stderr."""
    click.echo(f"infersight dashboard: {url}")
    sys.stdout.flush()
    instances = sum(len(d.instances) for d in plan.deployments)
    click.echo(
        f"live: {len(plan.deployments)} models, {instances} instances with a sidecar each; "
        f"API at {url}api/v1/, Prometheus metrics at {url}metrics",
        err=True,
    )
    for fault in plan.faults:
        click.echo(
            f"  fault {fault.kind.value} on {fault.instance} at "
            f"+{timedelta(seconds=int(fault.start_s))}–+{timedelta(seconds=int(fault.end_s))}",
            err=True,
        )
    click.echo("press Ctrl-C to stop", err=True)


def _watch(
    demo_: LiveDemo,
    stop: threading.Event,
    duration_s: float | None,
    first_incident: threading.Event | None = None,
) -> None:
    announced: dict[int, tuple[str, str | None, str]] = {}
    last_line = 0.0
    while not stop.wait(_POLL_S):
        current = demo_.status()
        _announce(demo_, current, announced)
        if announced and first_incident is not None:
            first_incident.set()
        if current.elapsed_s - last_line >= PROGRESS_EVERY_S:
            last_line = current.elapsed_s
            _progress_line(current)
        if duration_s is not None and current.elapsed_s >= duration_s:
            return


def _announce(
    demo_: LiveDemo, current: DemoStatus, announced: dict[int, tuple[str, str | None, str]]
) -> None:
    """Report incidents as they open, change severity, get (re)diagnosed, recover and resolve;
    ``announced`` remembers each open incident's severity, cause and phase as last reported."""
    firing = {i.id: i for i in current.firing}
    for incident in firing.values():
        severity, cause = incident.severity.value, demo_.cause_of(incident)
        if incident.id not in announced:
            click.echo(
                f"⚠ incident #{incident.id} opened: SLO {incident.slo} ({incident.scope}) "
                f"{severity}, burn rate {_peak(incident)} — "
                f"{'diagnosis: ' + cause if cause else 'diagnosing…'}",
                err=True,
            )
            announced[incident.id] = (severity, cause, incident.phase)
            continue
        before, diagnosed, phase = announced[incident.id]
        if severity != before:
            click.echo(f"  incident #{incident.id} is now {severity}", err=True)
        if cause and cause not in (diagnosed, "unknown"):
            # The page's diagnosis once it is made (the page waits for evidence), or a cause
            # raised over it with stronger evidence (the stored headline).
            click.echo(f"  incident #{incident.id} diagnosis: {cause}", err=True)
        if incident.phase != phase:
            what = "recovering (symptom cleared)" if incident.phase == "recovering" else "burning"
            click.echo(f"  incident #{incident.id} {what}", err=True)
        announced[incident.id] = (severity, cause or diagnosed, incident.phase)
    for incident_id in [i for i in announced if i not in firing]:
        del announced[incident_id]
        click.echo(f"✓ incident #{incident_id} resolved", err=True)


def _peak(incident: Incident) -> str:
    return f"{incident.peak_burn_rate:,.1f}×"


def _progress_line(current: DemoStatus) -> None:
    firing = ", ".join(f"{i.slo} ({i.severity.value})" for i in current.firing) or "none"
    click.echo(
        f"[{timedelta(seconds=int(current.elapsed_s))}] {current.served:,} requests served, "
        f"{current.stored:,} stored · firing: {firing}",
        err=True,
    )


# -- virtual time --------------------------------------------------------------------------
