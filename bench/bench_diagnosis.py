"""Diagnosis through the real path (issue 6): every shipped scenario, from simulator to page.

For each scenario shipped with the simulator: simulate it in virtual time (compressed as in
``bench_alerts``: the same fleet, traffic, seed and faults, the fault over ``[10 min, 20 min)``
of a 20-minute run; the quiet day is the 20 minutes around its 14:00 peak, its busiest) after
a pre-roll (``--pre-roll``, an hour by default, ten minutes in the tests) that warms the
simulated servers and gives the store a past (its first two minutes dropped, the rest written
straight into the store: on an empty store one slow request in the first minute burns a
99.9 % budget). Then drive the run through the production
path in virtual time, one evaluation interval (30 s) at a time:

* the requests that finished in the interval are exported as spans by the real
  ``opentelemetry-sdk`` exporters (``simulator.sinks.otlp``) to one real sidecar per instance
  (OTLP/HTTP receiver → spool → shipper → ``storage.writer``); the server and GPU samples of the
  interval, which a sidecar scrapes and reads from NVML, are written through ``storage.writer``;
* once the store holds them, the API's own jobs run at the interval's end (``create_app`` with
  a virtual clock: SLO evaluation under the default burn-rate policy → incidents → diagnosis →
  notification outbox, then the follow-up job that re-diagnoses firing incidents).

The SLOs are the fleet's (``simulator/scenarios/slos/fleet.yaml``: TTFT and TPOT per model and
fleet availability, 99.9 %). A single fault must open at least one incident, and every incident
must name the injected cause as its top cause, on the injected instance, with evidence naming
the injected signal — in the first page and in the last diagnosis; a mixed scenario's incidents
must each blame one of the injected causes, with both causes in their top two; the quiet day
must open no incident at all. One case is not a shipped scenario: ``total-outage``, the quiet
day with every request failing from ten minutes in — no cause in the vocabulary explains it,
so its incidents must say ``unknown`` for the whole scope with the error ratio as evidence.
Prints the accuracy table with the time from fault onset to the first notification in the
outbox (the page enters it in the evaluation that opens the incident). Each scenario gets a
store of its own (a temporary SQLite file, or ``--store`` emptied first); ``--jobs N`` runs
scenarios in N processes.

Without ``--scenario`` / ``--shipped`` it runs the adversarial scenario matrix of issue 13
instead (``diagnosis_matrix``: every single fault × GPU telemetry on/off × 1 or 2 data-parallel
engines × server spans only or client spans in the same trace, overlapping faults, low
traffic, quiet cells; each fault clears and the run goes on 20 minutes), printing a progress
line per cell and the accuracy table; ``--quick`` is its smoke subset (the suite runs it).

    python bench/bench_diagnosis.py [--quick] [--cell TEXT ...] [--out FILE] [--jobs N]
    python bench/bench_diagnosis.py --shipped | --scenario NAME ... [--store URL] [--pre-roll MIN]
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, Final

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parent))  # bench_alerts, from the tests

import bench_alerts
import diagnosis_matrix
import yaml
from sqlalchemy import Engine, func, select

from alerts.notify import Notification, SendResult
from api.app import create_app
from api.settings import ApiSettings
from collector.shipper import Backoff
from collector.sidecar import Sidecar, SidecarConfig
from core.slo import SloSpec
from service.jobs import SoleLeader
from service.specs import parse_specs
from simulator.events import Batch, Completion
from simulator.fleet import run_scenario
from simulator.scenario import Scenario
from simulator.sinks import MemorySink
from simulator.sinks.otlp import OtlpSink
from simulator.sinks.store import StoreSink
from simulator.specs import SCENARIOS_DIR, scenario_from_data, shipped_scenarios
from storage import incidents, signals, slo_store
from storage.outbox import Outbox
from storage.tables import requests
from storage.writer import open_writer

SLO_FILE: Final = SCENARIOS_DIR / "slos" / "fleet.yaml"
#: The API's default evaluation interval (``ApiSettings.evaluation_interval_s``).
INTERVAL_S: Final = 30.0
#: Not a shipped scenario: the quiet day at its peak, every request failing from ten minutes in
#: (the error side: no cause in the vocabulary, `unknown` with the errors as evidence).
OUTAGE: Final = "total-outage"
#: The quiet day is judged on its busiest 20 minutes.
QUIET_FROM: Final = "13:50:00"
#: Simulated before the run, so that servers are warm and the store has a past (on an empty
#: store one slow request in the first minute is a burn): its first ``WARM_UP`` is dropped (the
#: simulated servers start empty), the rest written straight into the store. Ten minutes in the
#: tests; the command line's default is an hour, so that the 1 h burn window is full of history
#: (with less, a burn reaches its rate sooner and pages earlier than it would in production).
PRE_ROLL: Final = timedelta(minutes=10)
WARM_UP: Final = timedelta(minutes=2)
#: How long the sidecars may take to land one interval's spans in the store.
LAND_TIMEOUT_S: Final = 60.0


def fleet_slos() -> list[SloSpec]:
    return parse_specs(SLO_FILE.read_text(encoding="utf-8"))


def _document(name: str, pre_roll: timedelta) -> dict[str, Any]:
    """The scenario file, starting ``pre_roll`` earlier (a quiet day: before its peak)."""
    path = SCENARIOS_DIR / f"{name}.yaml"
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    start = str(data["spec"]["start"])
    if not data["spec"].get("faults"):
        start = f"{start[:10]}T{QUIET_FROM}Z"
    at = datetime.fromisoformat(start.replace("Z", "+00:00")) - pre_roll
    data["spec"]["start"] = at.isoformat().replace("+00:00", "Z")
    return data


def scenario_for(name: str, pre_roll: timedelta = PRE_ROLL) -> Scenario:
    """What is simulated: ``pre_roll``, then the compressed run (``bench_alerts.compressed``:
    20 minutes, the faults over the last 10; a quiet day: the 20 minutes around its peak)."""
    shift = pre_roll.total_seconds()
    run = bench_alerts.compressed(scenario_from_data(_document(name, pre_roll), name))
    faults = tuple(
        dataclasses.replace(f, start_s=f.start_s + shift, end_s=f.end_s + shift) for f in run.faults
    )
    return dataclasses.replace(run, duration_s=run.duration_s + shift, faults=faults)


def simulate(name: str, pre_roll: timedelta = PRE_ROLL, gpu: bool = True) -> tuple[Scenario, Batch]:
    """The simulated run of ``name``; ``OUTAGE`` is the quiet day going dark at its peak.
    Without ``gpu``: no GPU samples, as from sidecars running ``--gpu-source none``."""
    if name == OUTAGE:
        scenario = dataclasses.replace(scenario_for("quiet-day", pre_roll), name=OUTAGE)
    else:
        scenario = scenario_for(name, pre_roll)
    sink = MemorySink()
    run_scenario(scenario, [sink])
    batch = Batch(tuple(sink.completions), tuple(sink.server_samples), tuple(sink.gpu_samples))
    if name == OUTAGE:
        batch = bench_alerts._outage(batch, outage_onset(scenario))
    return scenario, batch if gpu else bench_alerts.without_gpu(batch)


def run_start(scenario: Scenario) -> datetime:
    """Where the run (the last ``RUN_S``) starts, after the pre-roll."""
    return scenario.start + timedelta(seconds=scenario.duration_s - bench_alerts.RUN_S)


def outage_onset(scenario: Scenario) -> datetime:
    return run_start(scenario) + timedelta(seconds=bench_alerts.FAULT_FROM_S)


def truth(
    scenario: Scenario, gpu: bool = True
) -> tuple[tuple[tuple[str, str, str], ...], datetime]:
    """(kind, instance, expected cause) per injected fault, and the first fault's onset; without
    ``gpu``, the fallback each fault is expected to lead to."""
    if scenario.name == OUTAGE:
        return (("outage", "", "unknown"),), outage_onset(scenario)
    expected = bench_alerts.expected_causes(scenario, gpu)
    faults = tuple(
        (f.kind.value, f.instance, cause)
        for f, cause in zip(scenario.faults, expected, strict=True)
    )
    onsets = [t.start for t in scenario.ground_truth()]
    return faults, min(onsets, default=run_start(scenario))


# -- The real path -----------------------------------------------------------------------------


class Recorder:
    """The notifier at the edge: accepts every message (what is measured is the outbox)."""

    name = "recorder"

    def render(self, notification: Notification) -> dict[str, Any]:
        return {
            "incident": notification.incident_id,
            "summary": notification.summary(),
            "event": notification.event.value,
            "diagnosis": dict(notification.diagnosis),
        }

    def send(self, payload: Mapping[str, Any]) -> SendResult:
        return SendResult(True)


@contextmanager
def sidecars(engine: Engine, scenario: Scenario, spool: Path) -> Iterator[dict[str, Sidecar]]:
    """One running sidecar per instance, shipping into ``engine``'s store."""
    running: dict[str, Sidecar] = {}
    try:
        for deployment in scenario.deployments:
            for name in deployment.instances:
                config = SidecarConfig(
                    name,
                    spool / name,
                    http_port=0,
                    grpc_port=0,
                    window_s=0.0,
                    ship_interval_s=0.02,
                    model=deployment.profile.model_name,
                    backoff=Backoff(0.05, 1.5, 0.5),
                )
                running[name] = Sidecar(config, open_writer(engine)).start()
        yield running
    finally:
        for sidecar in running.values():
            sidecar.stop()


def _finished(c: Completion) -> datetime:
    return c.record.start + timedelta(seconds=c.record.e2e_s or 0.0)


def _stored(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(requests)).scalar_one())


@dataclasses.dataclass(frozen=True, slots=True)
class Seen:
    """One incident the run opened, with its first page and its last diagnosis."""

    slo: str
    scope: str
    severity: str
    opened_s: float
    """Fault onset (or run start) → the incident opened; its page enters the outbox then."""
    paged: Mapping[str, Any]
    last: Mapping[str, Any]

    @staticmethod
    def top_two(diagnosis: Mapping[str, Any]) -> list[str]:
        return [diagnosis.get("cause", "unknown")] + [
            a["cause"] for a in diagnosis.get("alternatives", [])[:1]
        ]


@dataclasses.dataclass(frozen=True, slots=True)
class PathOutcome:
    scenario: str
    faults: tuple[tuple[str, str, str], ...]
    """(fault kind, instance, expected cause) per injected fault."""
    seen: tuple[Seen, ...]
    notified_s: float | None
    """Fault onset → the first message in the outbox (``None``: nothing was sent)."""
    requests: int
    wall_s: float
    problems: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def first(self) -> Seen | None:
        return min(self.seen, key=lambda s: s.opened_s, default=None)


def judge(
    faults: Sequence[tuple[str, str, str]], seen: Sequence[Seen], gpu: bool = True
) -> tuple[str, ...]:
    """What is wrong with the run's incidents (empty: it passed). Without ``gpu`` every
    diagnosis must also say what evidence was missing."""
    if not faults:
        return tuple(f"incident on a quiet day: {s.slo} ({s.scope})" for s in seen)
    if not seen:
        return ("no incident opened",)
    problems = []
    expected = {cause for _, _, cause in faults}
    if len(faults) == 1:
        kind, instance, cause = faults[0]
        # A total outage has no cause in the vocabulary: `unknown`, scope-wide, with the error
        # ratio as evidence.
        signals = (
            bench_alerts.INJECTED_SIGNALS if gpu else bench_alerts.INJECTED_SIGNALS_WITHOUT_GPU
        )
        wanted = (
            frozenset({"error_ratio"})
            if kind == "outage"
            else signals[bench_alerts.FaultKind(kind)]
        )
        for s in seen:
            for when, d in (("page", s.paged), ("last", s.last)):
                named = {e["signal"] for e in d.get("evidence", [])}
                where = d.get("instance") or ""
                if d.get("cause") != cause or where != instance or not named & wanted:
                    problems.append(
                        f"{s.slo} {when}: {d.get('cause')} on {d.get('instance')} "
                        f"({', '.join(sorted(named)) or 'no evidence'})"
                    )
                if not gpu and not d.get("missing_evidence"):
                    problems.append(f"{s.slo} {when}: no missing evidence without GPU samples")
        return tuple(problems)
    top_two: set[str] = set()
    for s in seen:
        top_two.update(Seen.top_two(s.last))
        if s.last.get("cause") not in expected:
            problems.append(f"{s.slo}: {s.last.get('cause')} is not an injected cause")
    missing = expected - top_two
    if missing:
        problems.append(f"{', '.join(sorted(missing))} not in any incident's top two")
    return tuple(problems)


def _pre_roll(engine: Engine, batch: Batch, since: datetime, until: datetime) -> int:
    """Write what finished in ``[since, until)`` straight into the store; the rows written."""
    past = StoreSink(open_writer(engine))
    past.write(
        Batch(
            tuple(c for c in batch.completions if since <= c.record.start and _finished(c) < until),
            tuple(s for s in batch.server_samples if since <= s.ts < until),
            tuple(s for s in batch.gpu_samples if since <= s.ts < until),
        )
    )
    past.close()
    return past.inserted


def run_path(
    engine: Engine, name: str, workdir: Path, pre_roll: timedelta = PRE_ROLL, gpu: bool = True
) -> PathOutcome:
    """Drive scenario ``name`` through the real path into ``engine``'s (empty, migrated) store;
    without ``gpu``, as a fleet with no GPU telemetry (no GPU samples reach the store)."""
    started = time.perf_counter()
    scenario, batch = simulate(name, pre_roll, gpu)
    run_from = run_start(scenario)
    run_end = scenario.start + timedelta(seconds=scenario.duration_s)
    faults, onset = truth(scenario, gpu)
    now = [run_from]
    recorder = Recorder()
    app = create_app(
        ApiSettings(run_jobs=False),
        engine,
        lambda: now[0],
        lock=SoleLeader(),
        notifiers={recorder.name: recorder},
    )
    jobs = app.state.context.jobs
    for spec in fleet_slos():
        slo_store.put_slo(engine, spec, scenario.start)
    stored = _pre_roll(engine, batch, scenario.start + WARM_UP, run_from)
    completions = sorted((c for c in batch.completions if _finished(c) >= run_from), key=_finished)
    fed = 0
    with ExitStack() as stack:
        running = stack.enter_context(sidecars(engine, scenario, workdir / "spool"))
        sink = OtlpSink(lambda i: f"http://127.0.0.1:{running[i].http.port}/v1/traces")
        stack.callback(sink.close)
        samples = StoreSink(open_writer(engine))
        stack.callback(samples.close)
        while now[0] < run_end:
            end = min(now[0] + timedelta(seconds=INTERVAL_S), run_end)
            chunk = []
            while fed < len(completions) and _finished(completions[fed]) < end:
                chunk.append(completions[fed])
                fed += 1
            sink.write(Batch(tuple(chunk), (), ()))
            samples.write(
                Batch(
                    (),
                    tuple(s for s in batch.server_samples if now[0] <= s.ts < end),
                    tuple(s for s in batch.gpu_samples if now[0] <= s.ts < end),
                )
            )
            samples.flush()
            deadline = time.monotonic() + LAND_TIMEOUT_S
            while _stored(engine) < stored + fed:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: spans did not reach the store")
                time.sleep(0.01)
            now[0] = end
            jobs.tick_evaluation()
            jobs.tick_delivery()
        if sink.failed:
            raise RuntimeError(f"{name}: {sink.failed} span exports failed")
    label = scenario.name if gpu else scenario.name + bench_alerts.NO_GPU
    return _outcome(engine, label, faults, onset, fed, time.perf_counter() - started, gpu)


def _outcome(
    engine: Engine,
    name: str,
    faults: tuple[tuple[str, str, str], ...],
    onset: datetime,
    requests_: int,
    wall_s: float,
    gpu: bool = True,
) -> PathOutcome:
    messages = Outbox(engine).messages()
    pages: dict[int, Mapping[str, Any]] = {}
    for m in sorted(messages, key=lambda m: m.id):
        payload = json.loads(m.payload)
        if payload["event"] == "trigger":
            pages.setdefault(int(payload["incident"]), payload["diagnosis"])
    opened = incidents.list_incidents(engine, "all")
    notes = signals.notes(engine, [i.id for i in opened])
    seen = []
    for incident in sorted(opened, key=lambda i: i.opened_at):
        note = notes.get(incident.id)
        last = (note.diagnosis if note else None) or {}
        page = pages.get(incident.id, {})
        seen.append(
            Seen(
                incident.slo,
                incident.scope,
                incident.severity.value,
                (incident.opened_at - onset).total_seconds(),
                page,
                last,
            )
        )
    created = [m.created_at for m in messages if m.created_at is not None]
    notified = (min(created) - onset).total_seconds() if created else None
    return PathOutcome(
        name,
        faults,
        tuple(seen),
        notified,
        requests_,
        wall_s,
        judge(faults, seen, gpu),
    )


# -- Stores and the table ----------------------------------------------------------------------


def run_one(name: str, store: str | None = None, pre_roll: timedelta = PRE_ROLL) -> PathOutcome:
    """``run_path`` on a store of its own (a temporary SQLite file unless ``store``)."""
    with diagnosis_matrix.scratch_store(store, "diagnosis.db") as (engine, tmp):
        return run_path(engine, name, tmp, pre_roll)


HEADER: Final = (
    f"{'scenario':24} {'injected cause':32} {'top cause':18} {'conf':>5} {'top two':38} "
    f"{'evidence signals':44} {'onset→outbox':>12} result"
)


def row(o: PathOutcome) -> str:
    injected = "+".join(c for _, _, c in o.faults) or "none (no incident)"
    if o.scenario == OUTAGE:
        injected = "(every request fails)"
    first = o.first
    if first is None:
        top, conf, two, evidence = "no incident", "-", "-", "-"
    else:
        d = first.last
        top = str(d.get("cause"))
        conf = f"{float(d.get('confidence', 0.0)):.2f}"
        two = ",".join(dict.fromkeys(c for s in o.seen for c in Seen.top_two(s.last)))
        evidence = ",".join(dict.fromkeys(e["signal"] for e in d.get("evidence", [])[:4]))
    notified = "-" if o.notified_s is None else f"{o.notified_s:.0f} s"
    verdict = "PASS" if o.passed else "FAIL: " + "; ".join(o.problems)
    return (
        f"{o.scenario:24} {injected:32} {top:18} {conf:>5} {two:38} {evidence:44} "
        f"{notified:>12} {verdict}"
    )


def table(outcomes: Sequence[PathOutcome]) -> str:
    passed = sum(o.passed for o in outcomes)
    lines = [HEADER, *(row(o) for o in outcomes)]
    lines.append(f"accuracy: {passed}/{len(outcomes)} scenarios")
    return "\n".join(lines)


def incidents_table(outcomes: Sequence[PathOutcome]) -> str:
    lines = [f"{'scenario':24} {'slo':20} {'severity':8} {'opened':>8}  page → last diagnosis"]
    for o in outcomes:
        for s in o.seen:
            page = f"{s.paged.get('cause')} ({float(s.paged.get('confidence', 0)):.2f})"
            last = f"{s.last.get('cause')} ({float(s.last.get('confidence', 0)):.2f})"
            lines.append(
                f"{o.scenario:24} {s.slo:20} {s.severity:8} {s.opened_s:7.0f}s  {page} → {last}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> Sequence[PathOutcome | Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="store URL, emptied per scenario (default: SQLite)")
    parser.add_argument(
        "--scenario",
        action="append",
        help="shipped scenario name: run the shipped scenarios one by one instead of the matrix",
    )
    parser.add_argument("--shipped", action="store_true", help="every shipped scenario, one by one")
    parser.add_argument("--quick", action="store_true", help="the matrix's smoke subset")
    parser.add_argument("--cell", action="append", help="matrix cells whose name contains this")
    parser.add_argument("--out", help="also write the matrix's table to this file")
    parser.add_argument("--json", help="also write every cell's outcome as JSON to this file")
    parser.add_argument(
        "--table", help="print the table of a past run's --json file, judged again; run nothing"
    )
    parser.add_argument("--jobs", type=int, default=1, help="scenarios run in parallel")
    parser.add_argument(
        "--pre-roll",
        type=float,
        default=None,
        help="minutes of healthy past before each run (shipped scenarios: 60 by default, a "
        "full 1 h burn window, the tests use 10; the matrix: 10)",
    )
    args = parser.parse_args(argv)
    if args.scenario or args.shipped:
        return shipped(args)
    if args.table:
        text = Path(args.table).read_text(encoding="utf-8")
        if text.lstrip().startswith("["):
            document = json.loads(text)
        else:  # the JSON lines a run appends as it goes
            document = [json.loads(line) for line in text.splitlines() if line.strip()]
        outcomes = diagnosis_matrix.rejudged(document)
        print(diagnosis_matrix.table(outcomes))
        print()
        print(diagnosis_matrix.incidents_table(outcomes))
        return outcomes
    return matrix(args)


def matrix(args: argparse.Namespace) -> list[Any]:
    """The adversarial scenario matrix (``diagnosis_matrix``), cell by cell with progress."""
    cells = diagnosis_matrix.quick_cells() if args.quick else diagnosis_matrix.matrix_cells()
    if args.cell:
        cells = [c for c in cells if any(part in c.name for part in args.cell)]
    pre_roll_s = diagnosis_matrix.PRE_ROLL_S if args.pre_roll is None else args.pre_roll * 60
    groups: dict[Any, list[Any]] = {}
    for cell in sorted(cells, key=diagnosis_matrix.priority):
        groups.setdefault(diagnosis_matrix.simulation_key(cell), []).append(cell)
    started = time.perf_counter()
    print(f"{len(cells)} cells in {len(groups)} simulations, {args.jobs} job(s)", flush=True)
    progress = Path(args.json + ".lines") if args.json else None
    run = partial(_run_group, store=args.store, pre_roll_s=pre_roll_s, progress=progress)
    if args.jobs > 1 and not args.store:
        with ProcessPoolExecutor(args.jobs) as pool:
            done = [o for group in pool.map(run, groups.values()) for o in group]
    else:
        done = [o for group in map(run, groups.values()) for o in group]
    order = {cell: i for i, cell in enumerate(cells)}
    outcomes = sorted(done, key=lambda o: order[o.cell])
    wall = time.perf_counter() - started
    text = "\n\n".join(
        [
            diagnosis_matrix.table(outcomes),
            diagnosis_matrix.incidents_table(outcomes),
            f"{len(outcomes)} cells, {sum(o.sent for o in outcomes)} requests through the real "
            f"path, {wall:.0f} s wall with {args.jobs} job(s)",
        ]
    )
    print()
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    if args.json:
        document = [o.to_dict() for o in outcomes]
        Path(args.json).write_text(json.dumps(document, indent=1, default=str), encoding="utf-8")
    return outcomes


def _run_group(
    cells: Sequence[Any], store: str | None, pre_roll_s: float, progress: Path | None
) -> list[Any]:
    """One simulation's cells; each outcome is also appended to ``progress`` (JSON lines) as it
    finishes, so a run cut short still has a table (``--table FILE.lines``)."""
    out = []
    for cell in cells:
        outcome = diagnosis_matrix.run_one(cell, store, pre_roll_s)
        print(diagnosis_matrix.progress_line(outcome), flush=True)
        if progress is not None:
            line = json.dumps(outcome.to_dict(), default=str) + "\n"
            with progress.open("a", encoding="utf-8") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                f.write(line)
        out.append(outcome)
    return out


def shipped(args: argparse.Namespace) -> list[PathOutcome]:
    """Every shipped scenario (or ``--scenario``), one by one: the issue-6 accuracy table."""
    pre_roll = timedelta(minutes=60.0 if args.pre_roll is None else args.pre_roll)
    names = args.scenario or [*shipped_scenarios(), OUTAGE]
    started = time.perf_counter()
    if args.jobs > 1 and not args.store:
        with ProcessPoolExecutor(args.jobs) as pool:
            outcomes = list(pool.map(partial(run_one, pre_roll=pre_roll), names))
    else:
        outcomes = [run_one(name, args.store, pre_roll) for name in names]
    wall = time.perf_counter() - started
    print(table(outcomes))
    print()
    print(incidents_table(outcomes))
    print()
    print(f"{'scenario':24} {'requests':>8} {'wall s':>7} {'requests/s':>10}")
    for o in outcomes:
        print(f"{o.scenario:24} {o.requests:8d} {o.wall_s:7.1f} {o.requests / o.wall_s:10.0f}")
    print(f"all scenarios: {wall:.1f} s wall with {args.jobs} job(s)")
    return outcomes


if __name__ == "__main__":
    sys.exit(0 if all(o.passed for o in main()) else 1)
