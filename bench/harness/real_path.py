"""A scenario through the real path, from simulator to page: the harness of
``bench/bench_diagnosis.py`` (``--shipped``, ``--scenario``) and of ``tests/alerts``.

The scenario is simulated in virtual time, compressed as in ``scenarios`` (the same fleet,
traffic, seed and faults, the fault over ``[10 min, 20 min)`` of a 20-minute run; the quiet day
is the 20 minutes around its 14:00 peak, its busiest) after a pre-roll that warms the simulated
servers and gives the store a past (its first two minutes dropped, the rest written straight
into the store). ``run_path`` then drives the run through the production path in virtual time,
one evaluation interval (30 s) at a time: the requests that finished in the interval as spans
through the real ``opentelemetry-sdk`` exporters (``simulator.sinks.otlp``) to one real sidecar
per instance (OTLP/HTTP receiver → spool → shipper → ``storage.writer``), the interval's server
and GPU samples through ``storage.writer``, then the API's own jobs (``create_app`` with a
virtual clock: SLO evaluation → incidents → diagnosis → notification outbox, and the follow-up
job). ``judge`` holds the incidents it opened to the injected faults; ``table`` prints them.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

import yaml
from sqlalchemy import Engine, func, select

from infersight.alerts.notify import Notification, SendResult
from infersight.api.app import create_app
from infersight.api.settings import ApiSettings
from infersight.collector.shipper import Backoff
from infersight.collector.sidecar import Sidecar, SidecarConfig
from infersight.core.records import Role
from infersight.core.slo import SloSpec
from infersight.service.jobs import SoleLeader
from infersight.service.specs import parse_specs
from infersight.simulator.events import Batch, Completion
from infersight.simulator.faults import FaultKind
from infersight.simulator.fleet import run_scenario
from infersight.simulator.scenario import Scenario
from infersight.simulator.sinks import MemorySink
from infersight.simulator.sinks.otlp import OtlpSink
from infersight.simulator.sinks.store import StoreSink
from infersight.simulator.specs import SCENARIOS_DIR, scenario_from_data
from infersight.storage import incidents, signals, slo_store
from infersight.storage.outbox import Outbox
from infersight.storage.tables import requests
from infersight.storage.writer import open_writer

from . import scenarios

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
#: How long a decode instance's sidecar holds records for their proxy's spans (#30).
DECODE_WINDOW_S: Final = 0.5
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
    """What is simulated: ``pre_roll``, then the compressed run (``scenarios.compressed``:
    20 minutes, the faults over the last 10; a quiet day: the 20 minutes around its peak)."""
    shift = pre_roll.total_seconds()
    run = scenarios.compressed(scenario_from_data(_document(name, pre_roll), name))
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
        batch = scenarios.outage(batch, outage_onset(scenario))
    return scenario, batch if gpu else scenarios.without_gpu(batch)


def run_start(scenario: Scenario) -> datetime:
    """Where the run (the last ``RUN_S``) starts, after the pre-roll."""
    return scenario.start + timedelta(seconds=scenario.duration_s - scenarios.RUN_S)


def outage_onset(scenario: Scenario) -> datetime:
    return run_start(scenario) + timedelta(seconds=scenarios.FAULT_FROM_S)


def truth(
    scenario: Scenario, gpu: bool = True
) -> tuple[tuple[tuple[str, str, str], ...], datetime]:
    """(kind, instance, expected cause) per injected fault, and the first fault's onset; without
    ``gpu``, the fallback each fault is expected to lead to."""
    if scenario.name == OUTAGE:
        return (("outage", "", "unknown"),), outage_onset(scenario)
    expected = scenarios.expected_causes(scenario, gpu)
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
                role = Role(scenario.role(name))
                config = SidecarConfig(
                    name,
                    spool / name,
                    http_port=0,
                    grpc_port=0,
                    # A decode instance's proxy spans and its own may come in two exports.
                    window_s=DECODE_WINDOW_S if role is Role.DECODE else 0.0,
                    role=role,
                    ship_interval_s=0.02,
                    model=deployment.profile.model_name,
                    # The operator names the LoRA adapters it loaded (``--adapter``).
                    adapters=deployment.lora.names if deployment.lora is not None else (),
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
        signals = scenarios.INJECTED_SIGNALS if gpu else scenarios.INJECTED_SIGNALS_WITHOUT_GPU
        wanted = frozenset({"error_ratio"}) if kind == "outage" else signals[FaultKind(kind)]
        for s in seen:
            for when, d in (("page", s.paged), ("last", s.last)):
                named = {e["signal"] for e in d.get("evidence", [])}
                where = d.get("instance") or ""
                right = where == instance or (
                    kind != "outage" and scenarios.right_instance(kind, instance, where)
                )
                if d.get("cause") != cause or not right or not named & wanted:
                    problems.append(
                        f"{s.slo} {when}: {d.get('cause')} on {d.get('instance')} "
                        f"({', '.join(sorted(named)) or 'no evidence'})"
                    )
                owed = cause in scenarios.gpu_read_causes()
                if not gpu and owed and not d.get("missing_evidence"):
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
    users = [c.record.role is not Role.PREFILL for c in completions]
    fed = 0
    with ExitStack() as stack:
        running = stack.enter_context(sidecars(engine, scenario, workdir / "spool"))
        parallel = any(d.mix.parallel is not None for d in scenario.deployments)
        sink = OtlpSink(
            lambda i: f"http://127.0.0.1:{running[i].http.port}/v1/traces",
            # With parallel sampling: a request's sequence spans in one export (its flush).
            schedule_delay_s=3600.0 if parallel else 0.2,
        )
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
            landed = stored + sum(users[:fed])
            while _stored(engine) < landed:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: spans did not reach the store")
                time.sleep(0.01)
            now[0] = end
            jobs.tick_evaluation()
            jobs.tick_delivery()
        if sink.failed:
            raise RuntimeError(f"{name}: {sink.failed} span exports failed")
    label = scenario.name if gpu else scenario.name + scenarios.NO_GPU
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


# -- The table ---------------------------------------------------------------------------------


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
