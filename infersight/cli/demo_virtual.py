"""``infersight demo --virtual``: a scenario played into the store in virtual time, watched by
the API's own jobs on a virtual clock.

The scenario is moved so that it ends at ``end`` (now, by default): the dashboard then shows it
at its finest rollups. It is simulated a minute at a time (``simulator.fleet.run_scenario``);
after each minute is stored, the clock moves to the minute's end and the API's scheduled jobs
run there, exactly as they do under ``infersight serve`` and in the diagnosis benchmark
(``api.context.build_context`` with a virtual clock, ``Jobs.tick_evaluation`` and
``Jobs.tick_delivery``): SLO evaluation → incidents → diagnosis, then the follow-up job that
re-diagnoses firing incidents. Nothing of the evaluation is reimplemented here.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

import click

from infersight.api.context import build_context
from infersight.api.settings import ApiSettings
from infersight.cli.demo_report import incidents_report, progress_bar, report
from infersight.cli.demo_seed import BASELINE, HOLD_S, LEVELS, capture_baseline, store_step_run
from infersight.cli.settings import Settings
from infersight.core.retention import RetentionPolicy
from infersight.core.slo import SloSpec
from infersight.core.timestamps import iso, parse_time
from infersight.core.window import Resolution, Window
from infersight.service.admin import redact
from infersight.service.ingest import open_writer
from infersight.service.jobs import SoleLeader
from infersight.service.slos import put_slos
from infersight.simulator.fleet import Progress, RunResult, run_scenario
from infersight.simulator.scenario import Scenario
from infersight.simulator.sinks.store import StoreSink

if TYPE_CHECKING:
    from infersight.service.store import Store

#: The evaluation interval in virtual time. A whole minute keeps every burn window on minute
#: boundaries (read from minute rollups alone), as in the diagnosis benchmark.
INTERVAL_S: Final = 60.0
#: Where ``--virtual`` plays unless ``--store`` (or INFERSIGHT_DATABASE_URL) names a store: not
#: the live demo's ``./infersight.db``, whose recent traffic it would overlap.
VIRTUAL_STORE: Final = "sqlite:///infersight-virtual.db"
#: The dashboard's ranges (``?range=``) in seconds, shortest first.
DASHBOARD_RANGES: Final = (("1h", 3600), ("6h", 21600), ("24h", 86400), ("7d", 604800))


@dataclass(frozen=True, slots=True)
class Played:
    result: RunResult
    scenario: Scenario
    """The scenario as played (moved to end at ``end``)."""
    evaluations: int


def ending_at(scenario: Scenario, end: datetime, duration_s: float | None = None) -> Scenario:
    """``scenario`` (its first ``duration_s`` only, if given) moved so that it ends at ``end``
    floored to the minute (whole minutes keep the evaluation on rollup boundaries)."""
    seconds = scenario.duration_s if duration_s is None else min(duration_s, scenario.duration_s)
    seconds = max(INTERVAL_S, INTERVAL_S * round(seconds / INTERVAL_S))
    last = Resolution.MINUTE.floor(end)
    return dataclasses.replace(
        scenario,
        start=last - timedelta(seconds=seconds),
        duration_s=seconds,
        faults=tuple(f for f in scenario.faults if f.start_s < seconds),
    )


def play(
    store: Store,
    scenario: Scenario,
    slos: Sequence[SloSpec],
    retention: RetentionPolicy,
    progress: Callable[[Progress], None] | None = None,
) -> Played:
    """Store ``scenario`` minute by minute and run the API's jobs at each minute's end."""
    now = [scenario.start]
    put_slos(store, slos, scenario.start)
    context = build_context(
        ApiSettings(run_jobs=False, evaluation_interval_s=INTERVAL_S),
        store,
        lambda: now[0],
        lock=SoleLeader(),
        retention=retention,
    )
    jobs = context.jobs
    sink = StoreSink(open_writer(store))
    evaluations = [0]

    def tick(p: Progress) -> None:
        sink.flush()  # the minute is in the store before it is evaluated
        now[0] = scenario.start + timedelta(seconds=p.virtual_s)
        evaluations[0] += jobs.tick_evaluation()
        jobs.tick_delivery()
        if progress is not None:
            progress(p)

    try:
        result = run_scenario(scenario, [sink], chunk_s=INTERVAL_S, progress=tick)
    finally:
        sink.close()
    return Played(result, scenario, evaluations[0])


def seed(store: Store, plan: Scenario) -> None:
    """A baseline of the healthy stretch before the first fault, and a step load test stored
    as a run (on the wall clock: about half a minute), as the live demo seeds them."""
    healthy_s = min((f.start_s for f in plan.faults), default=plan.duration_s)
    if healthy_s >= INTERVAL_S:
        window = Window(plan.start, plan.start + timedelta(seconds=healthy_s))
        what = f"the virtual demo's healthy stretch before the first fault ({plan.name})"
        baseline = capture_baseline(store, window, window.end, what)
        click.echo(
            f"\ncaptured baseline {BASELINE} from the healthy first "
            f"{timedelta(seconds=int(healthy_s))} ({baseline.requests:,} requests)"
        )
    click.echo(f"step load test ({len(LEVELS)} levels × {HOLD_S:g} s) on a simulated instance…")
    run = store_step_run(store)
    click.echo(f"stored load-test run {run.id} (the Capacity page shows its knee)")


def run_virtual(
    store: Store,
    settings: Settings,
    scenario: Scenario,
    slos: list[SloSpec],
    url: str,
    duration_s: float | None,
    end: str | None,
) -> None:
    """``demo --virtual``: play ``scenario`` (its first ``duration_s``) ending at ``end`` (ISO
    or Unix seconds; now when ``None``) into ``store``, evaluating and diagnosing, and
    print the report and how to open the dashboard on ``url``."""
    live = end is None
    until = datetime.now(UTC) if end is None else parse_time("--end", end)
    plan = ending_at(scenario, until, duration_s)
    click.echo(
        f"playing '{plan.name}': {len(plan.instances)} simulated vLLM instances, "
        f"{timedelta(seconds=int(plan.duration_s))} of traffic in virtual time "
        f"({plan.start:%Y-%m-%d %H:%M}–"
        f"{plan.start + timedelta(seconds=plan.duration_s):%H:%M} UTC), "
        f"SLOs evaluated every minute: {', '.join(s.name for s in slos)}",
        err=True,
    )
    show, done = progress_bar()
    try:
        played = play(store, plan, slos, settings.retention(), progress=show)
    except KeyboardInterrupt:
        done()
        click.echo("interrupted: what was stored so far stays in the store", err=True)
        sys.exit(130)
    finally:
        done()
    result = played.result
    click.echo(
        f"stored {result.requests:,} requests, {result.server_samples:,} server and "
        f"{result.gpu_samples:,} GPU samples, evaluated the SLOs {played.evaluations:,} times "
        f"in {result.wall_s:.0f} s",
        err=True,
    )
    report(store, plan, result, settings.exact_max_rows)
    incidents_report(store, plan)
    seed(store, plan)
    last = plan.start + timedelta(seconds=plan.duration_s)
    if live:  # it ends now: a range ending now, as the dashboard's range menu has them
        shown = next((k for k, v in DASHBOARD_RANGES if v >= plan.duration_s), "30d")
        query = f"range={shown}"
    else:
        query = f"start={iso(plan.start)}&end={iso(last)}"
    click.echo(
        f"\nTo look at it in the dashboard: infersight --store {redact(url)} serve\n"
        f"  then open http://127.0.0.1:8080/?{query}"
    )
