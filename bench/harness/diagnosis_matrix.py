"""The adversarial scenario matrix of ``bench_diagnosis`` (issue 13): diagnosis on telemetry as
production has it, through the real path, from page to resolution.

Cells: every single-fault scenario shipped with the simulator × GPU telemetry {on, off} ×
{1, 2 data-parallel engines per instance} × {server spans only, client spans in the same
trace}; plus two faults on different instances in overlapping windows, low traffic (1 req/s
per model), and quiet days (no fault). Every fault has an explicit end: it lasts
``FAULT_S`` and the run goes on ``AFTER_S`` (20 minutes) after it cleared.

Each cell is its own fleet (the shipped scenario's fleet, seed and fault magnitude; with two
engines an instance gets twice the traffic, so each engine is as loaded as a one-engine
instance), simulated in virtual time, then driven interval by interval (30 s, the API's
evaluation interval) through the production path:

* spans of the requests that finished in the interval: the simulator's ``OtlpSink``
  (``ReadableSpan``s through the SDK's ``BatchSpanProcessor`` and OTLP/HTTP exporter; with
  client spans, an application's spans of another ``service.name`` in the same trace, sent to
  the same endpoint) → one real sidecar per instance (receiver → mapping → spool → shipper →
  ``storage.writer``);
* server samples: the simulator's vLLM ``/metrics`` (one series per engine, ``engine="0"``,
  ``"1"``) served by ``prometheus_client``'s HTTP server and scraped by the sidecar's own
  ``Scraper`` (virtual timestamps) through its ``PeriodicTask`` into the spool;
* GPU samples (telemetry on): the simulated boards read as the NVML sampler would, through the
  same ``PeriodicTask`` into the spool (a GPU is the one edge faked); telemetry off: no GPU
  sampler at all, as with ``--gpu-source none``;
* then the API's own jobs at the interval's end (``create_app`` with a virtual clock): SLO
  evaluation → incidents → diagnosis → outbox, and the follow-up job.

What is reported per cell, from what the product stores (never from the diagnosis engine
directly): the cause at page time (the diagnosis in the first notification of each incident the
evaluation opened, i.e. its onset diagnosis), the cause the stored incident shows
(``GET /api/v1/incidents``) ``AFTER_S`` after the fault cleared, and whether it resolved. The
expected cause comes from the injected fault (``simulator.faults.EXPECTED_CAUSE``); where GPU
telemetry is off and the expected cause needs GPU evidence, the matrix expects the fallback
the symptom pattern supports (``EXPECTED_CAUSE_WITHOUT_GPU``) with a non-empty ``missing_evidence``.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import numpy as np
import yaml
from sqlalchemy import Engine, func, select
from starlette.testclient import TestClient

from infersight.alerts.notify import Notification, SendResult
from infersight.api.app import create_app
from infersight.api.settings import ApiSettings
from infersight.collector.periodic import PeriodicTask
from infersight.collector.scrape.scraper import Scraper
from infersight.collector.shipper import Backoff
from infersight.collector.sidecar import Sidecar, SidecarConfig
from infersight.core.records import Role
from infersight.core.samples import GpuSample
from infersight.service.jobs import SoleLeader
from infersight.service.specs import parse_specs
from infersight.simulator.events import Batch, Completion, EngineSample
from infersight.simulator.faults import (
    DEFAULT_MAGNITUDE,
    EXPECTED_CAUSE,
    EXPECTED_CAUSE_WITHOUT_GPU,
    ROLE_FAULTS,
    Fault,
    FaultKind,
)
from infersight.simulator.fleet import run_scenario
from infersight.simulator.scenario import Scenario
from infersight.simulator.sinks import MemorySink
from infersight.simulator.sinks.otlp import ClientSpans, OtlpSink
from infersight.simulator.sinks.prometheus import MetricsServer, MetricsSink
from infersight.simulator.sinks.store import StoreSink
from infersight.simulator.specs import SCENARIOS_DIR, scenario_from_data
from infersight.storage import migrate, slo_store
from infersight.storage.engine import create_store_engine
from infersight.storage.outbox import Outbox
from infersight.storage.tables import metadata, request_parts, requests
from infersight.storage.writer import open_writer

from . import scenarios
from .real_path import DECODE_WINDOW_S

SLO_FILE: Final = SCENARIOS_DIR / "slos" / "fleet.yaml"
#: The evaluation interval of the matrix (``INFERSIGHT_EVALUATION_INTERVAL_S``). The API's
#: default is 30 s; a whole minute keeps every window on minute boundaries, so the burn rates
#: are read from minute rollups alone (with 30 s, half the evaluations read the ragged minute
#: from raw rows, which costs the whole matrix several times its time on a 2-core machine).
INTERVAL_S: Final = 60.0
#: The sidecar's scrape interval (server /metrics and GPUs) in the matrix.
SCRAPE_S: Final = 30.0
#: Simulated before the run and written straight into the store (records only), so the burn
#: windows have a past; its first ``WARM_UP_S`` (servers filling up) is dropped.
PRE_ROLL_S: Final = 600.0
WARM_UP_S: Final = 120.0
#: Through the real path before the fault: the diagnosis's reference (5 min ending 1 min
#: before the burn's onset) lies in it, so it went through the same ingest as the incident.
LEAD_S: Final = 420.0
FAULT_S: Final = 300.0
AFTER_S: Final = 1200.0
#: Low traffic: each model's deployment receives this many requests per second in all.
LOW_RATE: Final = 1.0
LAND_TIMEOUT_S: Final = 120.0
#: Requests per span export where some have parallel sequences (at most ~8 spans each).
SEQUENCE_SLICE: Final = 200

#: The faults whose telling evidence is on the GPU (clocks and throttle reasons, ECC errors, an
#: idle GPU: ``scenarios.INJECTED_SIGNALS``). Without GPU samples a right diagnosis names
#: ``simulator.faults.EXPECTED_CAUSE_WITHOUT_GPU`` (from what each fault does, never from a
#: diagnosis: a throttled and a degraded board both slow decoding on one instance and look alike
#: without clocks and ECC counters, ``decode_bound``; a starved host still shows in its slow
#: tokenizer and decode steps, ``host_bound``), and for these it must list its
#: ``missing_evidence``; the other faults never needed GPU samples.
GPU_EVIDENCED: Final = frozenset(
    {FaultKind.THERMAL_THROTTLE, FaultKind.DEGRADED_INSTANCE, FaultKind.CPU_STARVED}
)

FAULT_FILES: Final = {
    FaultKind.ARRIVAL_SURGE: "fault-arrival-surge",
    FaultKind.SLOW_TOKENIZER: "fault-slow-tokenizer",
    FaultKind.LONG_PROMPT_FLOOD: "fault-long-prompt-flood",
    FaultKind.THERMAL_THROTTLE: "fault-thermal-throttle",
    FaultKind.KV_PRESSURE: "fault-kv-pressure",
    FaultKind.DEGRADED_INSTANCE: "fault-degraded-instance",
    FaultKind.CPU_STARVED: "fault-cpu-starved",
    FaultKind.SPEC_DECODE_COLLAPSE: "fault-spec-decode-collapse",
    FaultKind.KV_TRANSFER_SLOW: "fault-kv-transfer-slow",
    FaultKind.PREFILL_POOL_OVERLOAD: "fault-prefill-pool-overload",
    FaultKind.DECODE_POOL_OVERLOAD: "fault-decode-pool-overload",
}
#: Faults of a disaggregated fleet: one engine per instance, no client spans (#30).
PD_FAULTS: Final = frozenset(ROLE_FAULTS)


@dataclasses.dataclass(frozen=True, slots=True)
class Injected:
    """One fault of a cell: kind, instance, window within the run, magnitude."""

    kind: FaultKind
    instance: str
    start_s: float
    end_s: float
    magnitude: float

    @property
    def cause(self) -> str:
        return EXPECTED_CAUSE[self.kind]


@dataclasses.dataclass(frozen=True, slots=True)
class Cell:
    family: str
    """``single``, ``overlap``, ``low-traffic`` or ``quiet``."""
    label: str
    faults: tuple[Injected, ...]
    gpu: bool = True
    engines: int = 1
    client: bool = False
    low_traffic: bool = False
    after_s: float = AFTER_S
    """How long the run goes on after the last fault cleared (the smoke cell: shorter)."""
    fleet: str = ""
    """The shipped scenario whose deployments the cell runs (default: its fault's scenario,
    ``FAULT_FILES``; a quiet cell: the fault scenarios' fleet)."""

    @property
    def name(self) -> str:
        parts = [
            self.label,
            "gpu" if self.gpu else "no-gpu",
            f"dp{self.engines}",
            "client" if self.client else "server",
        ]
        return " ".join(parts)

    @property
    def run_s(self) -> float:
        end = max((f.end_s for f in self.faults), default=LEAD_S + FAULT_S)
        return end + self.after_s


def _base_fault(kind: FaultKind) -> Injected:
    return _file_fault(FAULT_FILES[kind])


def _file_fault(name: str) -> Injected:
    """The one fault of shipped scenario ``name``, over the cell's fault window."""
    data = yaml.safe_load((SCENARIOS_DIR / f"{name}.yaml").read_text("utf-8"))
    [spec] = data["spec"]["faults"]
    kind = FaultKind(spec["kind"])
    magnitude = float(spec.get("magnitude") or DEFAULT_MAGNITUDE[kind])
    return Injected(kind, spec["instance"], LEAD_S, LEAD_S + FAULT_S, magnitude)


def matrix_cells() -> list[Cell]:
    """Every cell of the full matrix, in the order they run."""
    cells = []
    for kind in FaultKind:
        fault = _base_fault(kind)
        for gpu in (True, False):
            if kind in PD_FAULTS:
                cells.append(Cell("single", kind.value, (fault,), gpu))
                continue
            for engines in (1, 2):
                for client in (False, True):
                    cells.append(Cell("single", kind.value, (fault,), gpu, engines, client))
    cells.extend(extra_cells())
    return cells


def extra_cells() -> list[Cell]:
    throttle = _base_fault(FaultKind.THERMAL_THROTTLE)  # on vllm-70b-0
    surge = _base_fault(FaultKind.ARRIVAL_SURGE)  # on vllm-8b-0
    kv = _base_fault(FaultKind.KV_PRESSURE)  # on vllm-8b-1
    starved = _base_fault(FaultKind.CPU_STARVED)  # on vllm-8b-0
    flood = _base_fault(FaultKind.LONG_PROMPT_FLOOD)  # on vllm-8b-1
    # Overlapping windows on two instances: the second starts 4 minutes into the first.
    late = LEAD_S + 240.0
    surge_late = dataclasses.replace(surge, start_s=late, end_s=late + FAULT_S)
    kv_late = dataclasses.replace(kv, start_s=late, end_s=late + FAULT_S)
    cells = [
        Cell("overlap", "throttle+surge", (throttle, surge_late)),
        Cell("overlap", "throttle+surge", (throttle, surge_late), gpu=False, client=True),
        Cell("overlap", "throttle+kv", (throttle, kv_late), engines=2),
        # At 1 req/s only faults that break the SLOs for most requests can page (a 1.8×
        # slower decode leaves the 70B's TPOT under its 45 ms): a starved host (TPOT past
        # 20 ms) and a flood of long prompts (TTFT).
        Cell("low-traffic", "cpu_starved@1rps", (starved,), low_traffic=True),
        Cell(
            "low-traffic",
            "cpu_starved@1rps",
            (starved,),
            gpu=False,
            engines=2,
            client=True,
            low_traffic=True,
        ),
        Cell("low-traffic", "long_prompt_flood@1rps", (flood,), low_traffic=True),
    ]
    for gpu, engines, client in (
        (True, 1, False),
        (False, 1, True),
        (True, 2, True),
        (False, 2, False),
    ):
        cells.append(Cell("quiet", "quiet-day", (), gpu, engines, client))
    # Speculative decoding healthy all along (#30): acceptance steady, no page.
    spec = FAULT_FILES[FaultKind.SPEC_DECODE_COLLAPSE]
    for gpu in (True, False):
        cells.append(Cell("quiet", "quiet-spec-decode", (), gpu, fleet=spec))
    # A healthy disaggregated fleet (#30): KV transfers, both pools steady, no page.
    pd = FAULT_FILES[FaultKind.KV_TRANSFER_SLOW]
    for gpu in (True, False):
        cells.append(Cell("quiet", "quiet-pd", (), gpu, fleet=pd))
    cells.extend(lora_cells())
    return cells


#: The LoRA scenarios (#30): a base model with two adapters and a share of ``n`` > 1 requests.
LORA_FAULT_FILE: Final = "fault-lora-arrival-surge"
LORA_QUIET_FILE: Final = "quiet-lora"


def lora_cells() -> list[Cell]:
    """A LoRA deployment healthy all along (no page), and an arrival surge on one of its
    instances (the surge named on that instance, whatever adapters its requests asked for);
    GPU telemetry on and off. One engine per instance (vLLM's LoRA metrics refuse data
    parallelism), server spans only."""
    surge = _file_fault(LORA_FAULT_FILE)
    cells = []
    for gpu in (True, False):
        cells.append(Cell("quiet", "quiet-lora", (), gpu, fleet=LORA_QUIET_FILE))
        cells.append(Cell("single", "arrival_surge@lora", (surge,), gpu, fleet=LORA_FAULT_FILE))
    return cells


def quick_cells() -> list[Cell]:
    """The smoke subset the suite runs: a starved host at 1 req/s per engine that clears two
    minutes in, through every adversarial shape at once (no GPU samples, two engines, client
    spans), watched for eleven minutes after it cleared (its 5 min window forgets the burn,
    then ``resolve_after`` resolves the incident)."""
    starved = _base_fault(FaultKind.CPU_STARVED)
    short = dataclasses.replace(starved, end_s=starved.start_s + 120.0)
    return [
        Cell(
            "single",
            "cpu_starved@1rps",
            (short,),
            gpu=False,
            engines=2,
            client=True,
            low_traffic=True,
            after_s=660.0,
        ),
    ]


#: The order simulations run in (``priority``): the cells each fix is measured by first, so that
#: a run cut short still covers every dimension — KV pressure on two engines (per-engine KV
#: usage), the GPU-evidenced faults (fallbacks without GPU samples), quiet and overlapping
#: cells, then the rest; the 2-engine runs cost twice their 1-engine cells.
_FIRST: Final = (
    (FaultKind.KV_PRESSURE, 2),
    (FaultKind.THERMAL_THROTTLE, 1),
    (FaultKind.DEGRADED_INSTANCE, 1),
    (FaultKind.CPU_STARVED, 1),
)


def priority(cell: Cell) -> tuple[int, int, str]:
    """Sort key of a cell's simulation group (see ``_FIRST``)."""
    if cell.family == "single":
        key = (cell.faults[0].kind, cell.engines)
        if key in _FIRST:
            return (0, _FIRST.index(key), "")
        return (3 if cell.engines == 1 else 5, 0, cell.label)
    rank = {"quiet": 1, "overlap": 2, "low-traffic": 4}[cell.family]
    return (rank, cell.engines, cell.label)


# -- The cell's fleet ---------------------------------------------------------------------------


def scenario_of(cell: Cell, pre_roll_s: float = PRE_ROLL_S) -> Scenario:
    """The cell's fleet: the fault scenario's deployments that a fault hits (a quiet cell: the
    whole fleet of the fault scenarios, with no fault), ``pre_roll_s`` + the run, its faults
    shifted past the pre-roll, servers and GPUs sampled every ``SCRAPE_S``."""
    source = cell.fleet or (
        FAULT_FILES[cell.faults[0].kind] if cell.faults else "fault-arrival-surge"
    )
    data: dict[str, Any] = yaml.safe_load((SCENARIOS_DIR / f"{source}.yaml").read_text("utf-8"))
    spec = data["spec"]
    start = datetime.fromisoformat(str(spec["start"]).replace("Z", "+00:00"))
    spec["start"] = (start - timedelta(seconds=pre_roll_s)).isoformat().replace("+00:00", "Z")
    spec["duration"] = pre_roll_s + cell.run_s
    spec["faults"] = []
    spec["gpu_telemetry"] = cell.gpu
    spec["sample_interval"] = SCRAPE_S
    if cell.faults:
        # Only the deployments a fault hits: the other model's traffic is another SLO's and
        # would only add to the run's cost.
        spec["fleet"] = [
            d
            for d in spec["fleet"]
            if any(f.instance.startswith(f"{d['name_prefix']}-") for f in cell.faults)
        ]
    for deployment in spec["fleet"]:
        deployment["engines"] = cell.engines
        arrival = deployment["arrival"]
        if cell.low_traffic:
            arrival.update({"process": "poisson", "rate": LOW_RATE * cell.engines})
        else:
            arrival["rate"] = float(arrival["rate"]) * cell.engines
    scenario = scenario_from_data(data, cell.name)
    faults = tuple(
        Fault(f.kind, f.instance, pre_roll_s + f.start_s, pre_roll_s + f.end_s, f.magnitude)
        for f in cell.faults
    )
    return dataclasses.replace(scenario, name=cell.name, faults=faults)


_SIMULATED: dict[tuple[Any, ...], tuple[Scenario, Batch]] = {}


def simulation_key(cell: Cell) -> tuple[Any, ...]:
    """Cells with the same key share one simulation (spans and telemetry differ, not the run)."""
    return (cell.faults, cell.fleet, cell.engines, cell.low_traffic)


def simulate(cell: Cell, pre_roll_s: float = PRE_ROLL_S) -> tuple[Scenario, Batch]:
    """The cell's run. The fleet is simulated once per ``simulation_key`` in a process, with
    GPU telemetry; a cell without it gets the same run without GPU samples (the simulator's
    ``gpu_telemetry=False`` drops exactly those)."""
    key = (*simulation_key(cell), pre_roll_s)
    if key not in _SIMULATED:
        _SIMULATED.clear()
        scenario = scenario_of(dataclasses.replace(cell, gpu=True), pre_roll_s)
        sink = _Keeping()
        run_scenario(scenario, [sink])
        _SIMULATED[key] = (scenario, sink.batch())
    scenario, batch = _SIMULATED[key]
    scenario = dataclasses.replace(scenario, name=cell.name, gpu_telemetry=cell.gpu)
    if not cell.gpu:
        batch = dataclasses.replace(batch, gpu_samples=())
    return scenario, batch


class _Keeping(MemorySink):
    """``MemorySink`` that also keeps the per-engine readings."""

    def __init__(self) -> None:
        super().__init__()
        self.engine_samples: list[EngineSample] = []

    def write(self, batch: Batch) -> None:
        super().write(batch)
        self.engine_samples.extend(batch.engine_samples)

    def batch(self) -> Batch:
        return Batch(
            tuple(self.completions),
            tuple(self.server_samples),
            tuple(self.gpu_samples),
            tuple(self.engine_samples),
        )


# -- The real path ------------------------------------------------------------------------------


class Recorder:
    """The notifier at the edge: accepts every message (what is measured is the outbox)."""

    name = "recorder"

    def render(self, notification: Notification) -> dict[str, Any]:
        return {
            "incident": notification.incident_id,
            "event": notification.event.value,
            "diagnosis": dict(notification.diagnosis),
        }

    def send(self, payload: Mapping[str, Any]) -> SendResult:
        return SendResult(True)


class SimulatedGpus:
    """The GPU edge: what NVML would read off the simulated boards at the current tick."""

    name = "gpu"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.pending: list[GpuSample] = []

    def sample(self) -> Sequence[GpuSample]:
        out, self.pending = self.pending, []
        return out


@dataclasses.dataclass(slots=True)
class _Node:
    """One instance's sidecar with its scraped server and (maybe) its GPUs."""

    sidecar: Sidecar
    metrics: MetricsServer
    scrape: PeriodicTask
    gpus: SimulatedGpus | None
    gpu_task: PeriodicTask | None


@contextmanager
def nodes(
    engine: Engine, scenario: Scenario, spool: Path, metrics: MetricsSink, now: Callable[[], Any]
) -> Iterator[dict[str, _Node]]:
    running: dict[str, _Node] = {}
    try:
        for deployment in scenario.deployments:
            model = deployment.profile.model_name
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
                    sample_ship_interval_s=0.0,
                    model=model,
                    # The operator names the adapters it loaded (``--adapter``).
                    adapters=deployment.lora.names if deployment.lora is not None else (),
                    backoff=Backoff(0.05, 1.5, 0.5),
                )
                sidecar = Sidecar(config, open_writer(engine)).start()
                server = MetricsServer(metrics.vllm_registry(name, model))
                scraper = Scraper(server.url, name, scenario.sample_interval_s, now=now)
                gpus = SimulatedGpus(scenario.sample_interval_s) if scenario.gpu_telemetry else None
                running[name] = _Node(
                    sidecar,
                    server,
                    PeriodicTask(scraper, sidecar.spool),
                    gpus,
                    PeriodicTask(gpus, sidecar.spool) if gpus is not None else None,
                )
        yield running
    finally:
        for node in running.values():
            node.sidecar.stop()
            node.metrics.close()


def _finished(c: Completion) -> datetime:
    return c.record.start + timedelta(seconds=c.record.e2e_s or 0.0)


def _truth_problems(
    engine: Engine, feed: _Feed, run_from: datetime, per_adapter: bool
) -> tuple[str, ...]:
    """Tokens stored = tokens sent, TTFT p50 and p99 within 1 % of the simulator's truth and,
    ``per_adapter`` (LoRA cells: the adapter is a dimension like the model; an ``n`` > 1
    request is one request of its adapter), requests stored = sent per (model, adapter): the
    users' requests of the run (those that finished after ``run_from``) against the rows the
    real path stored for them, read once."""
    users = [c.record for c in feed.completions[: feed.fed] if not c.record.is_part]
    r = requests.c
    columns = (r.start, r.e2e_s, r.ttft_s, r.input_tokens, r.output_tokens, r.model, r.adapter)
    with engine.connect() as connection:
        rows = connection.execute(select(*columns)).all()
    edge = run_from.timestamp()
    stored = [row for row in rows if _epoch(row[0]) + (row[1] or 0.0) >= edge]
    problems = []
    for name, sent, got in (
        ("input tokens", sum(u.input_tokens or 0 for u in users), sum(x[3] or 0 for x in stored)),
        ("output tokens", sum(u.output_tokens or 0 for u in users), sum(x[4] or 0 for x in stored)),
    ):
        if sent != got:
            problems.append(f"{got} {name} stored for {sent} sent")
    truth = [u.ttft_s for u in users if u.ttft_s is not None]
    seen = [x[2] for x in stored if x[2] is not None]
    if truth and seen:
        for q in (0.5, 0.99):
            want, have = float(np.quantile(truth, q)), float(np.quantile(seen, q))
            if abs(have - want) > 0.01 * want:
                problems.append(f"TTFT p{q * 100:g} {have:.4f} s against a true {want:.4f} s")
    if per_adapter:
        sent_by = Counter((u.model, u.adapter) for u in users)
        got_by = Counter((x[5], x[6]) for x in stored)
        problems += [
            f"{got_by[key]} requests of {key[0]}/{key[1] or 'base'} stored for {sent_by[key]} sent"
            for key in sorted(set(sent_by) | set(got_by))
            if got_by[key] != sent_by[key]
        ]
    return tuple(problems)


def _epoch(ts: datetime) -> float:
    return (ts if ts.tzinfo else ts.replace(tzinfo=UTC)).timestamp()


def _count(engine: Engine, table: Any) -> int:
    with engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(table)).scalar_one())


def empty(engine: Engine) -> None:
    with engine.begin() as connection:
        for table in reversed(metadata.sorted_tables):
            connection.execute(table.delete())


@contextmanager
def scratch_store(store: str | None, filename: str) -> Iterator[tuple[Engine, Path]]:
    """A migrated, empty store (a temporary SQLite ``filename`` unless ``store``) and a
    temporary folder beside it, disposed of afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_store_engine(store or f"sqlite:///{tmp}/{filename}")
        try:
            migrate.upgrade(engine)
            empty(engine)
            yield engine, Path(tmp)
        finally:
            engine.dispose()


@dataclasses.dataclass(frozen=True, slots=True)
class Seen:
    """One incident of a cell: its page (onset diagnosis) and what the store shows at the end."""

    id: int
    slo: str
    scope: str
    opened_s: float
    """Fault onset (or run start) → the incident opened."""
    paged: Mapping[str, Any]
    final: Mapping[str, Any]
    state: str


@dataclasses.dataclass(frozen=True, slots=True)
class CellOutcome:
    cell: Cell
    seen: tuple[Seen, ...]
    sent: int
    """Requests sent as spans through the real path."""
    stored: int
    """Request records the run added to the store (≠ ``sent``: spans became extra records)."""
    wall_s: float
    problems: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        c = self.cell
        return {
            "cell": c.name,
            "family": c.family,
            "gpu": c.gpu,
            "engines": c.engines,
            "client_spans": c.client,
            "faults": [
                {
                    "kind": f.kind.value,
                    "instance": f.instance,
                    "start_s": f.start_s,
                    "end_s": f.end_s,
                    "expected": list(expected_causes(f, c.gpu)),
                }
                for f in c.faults
            ],
            "sent": self.sent,
            "stored": self.stored,
            "wall_s": self.wall_s,
            "problems": list(self.problems),
            "incidents": [dataclasses.asdict(s) for s in self.seen],
        }


class _Feed:
    """What the run hands the real path, interval by interval: spans of the requests that
    finished, the servers' /metrics at each sample time, and the GPUs' readings."""

    def __init__(self, batch: Batch, run_from: datetime, metrics: MetricsSink) -> None:
        self.metrics = metrics
        self.completions = sorted(
            (c for c in batch.completions if _finished(c) >= run_from), key=_finished
        )
        self.fed = 0
        self.samples = 0
        self.engines: dict[datetime, list[EngineSample]] = {}
        for e in batch.engine_samples:
            if e.sample.ts >= run_from:
                self.engines.setdefault(e.sample.ts, []).append(e)
        self.gpus: dict[tuple[datetime, str], list[GpuSample]] = {}
        for g in batch.gpu_samples:
            if g.ts >= run_from:
                self.gpus.setdefault((g.ts, g.instance), []).append(g)
        for c in batch.completions:
            if _finished(c) < run_from:
                metrics.vllm(c.record.instance, c.record.model).observe(c)

    def fed_parts(self) -> int:
        """Prefill legs among the completions fed (parts of users' requests, not requests)."""
        return sum(c.record.is_part for c in self.completions[: self.fed])

    def spans(self, sink: OtlpSink, end: datetime) -> None:
        chunk = []
        while self.fed < len(self.completions) and _finished(self.completions[self.fed]) < end:
            chunk.append(self.completions[self.fed])
            self.fed += 1
        if any(c.sequences for c in chunk):
            # One request's sequence spans in one export each (the SDK splits an export at
            # 2048 spans), so that each sidecar folds them in one shipping pass.
            for at in range(0, len(chunk), SEQUENCE_SLICE):
                sink.write(Batch(tuple(chunk[at : at + SEQUENCE_SLICE])))
        else:
            sink.write(Batch(tuple(chunk)))
        for c in chunk:
            self.metrics.vllm(c.record.instance, c.record.model).observe(c)

    def sample(
        self, running: Mapping[str, _Node], since: datetime, end: datetime, tick: list[datetime]
    ) -> None:
        for ts in sorted(t for t in self.engines if since <= t < end):
            tick[0] = ts
            for e in self.engines[ts]:
                self.metrics.vllm(e.sample.instance, e.sample.model).update(
                    e.sample, e.index, e.lora
                )
            for name, node in running.items():
                self.samples += node.scrape.run_once()
                if node.gpus is not None and node.gpu_task is not None:
                    node.gpus.pending = self.gpus.get((ts, name), [])
                    self.samples += node.gpu_task.run_once()


def _pre_roll(engine: Engine, scenario: Scenario, batch: Batch, run_from: datetime) -> None:
    """The healthy past, straight into the store (request records only)."""
    warm = scenario.start + timedelta(seconds=WARM_UP_S)
    past = StoreSink(open_writer(engine))
    kept = (c for c in batch.completions if warm <= c.record.start and _finished(c) < run_from)
    past.write(Batch(tuple(kept)))
    past.close()


def run_cell(
    engine: Engine, cell: Cell, workdir: Path, pre_roll_s: float = PRE_ROLL_S
) -> CellOutcome:
    """Drive ``cell`` through the real path into ``engine``'s (empty, migrated) store."""
    started = time.perf_counter()
    scenario, batch = simulate(cell, pre_roll_s)
    run_from = scenario.start + timedelta(seconds=pre_roll_s)
    run_end = scenario.start + timedelta(seconds=scenario.duration_s)
    now = [run_from]
    tick = [run_from]
    recorder = Recorder()
    app = create_app(
        ApiSettings(run_jobs=False, evaluation_interval_s=INTERVAL_S),
        engine,
        lambda: now[0],
        lock=SoleLeader(),
        notifiers={recorder.name: recorder},
    )
    jobs = app.state.context.jobs
    for spec in parse_specs(SLO_FILE.read_text(encoding="utf-8")):
        slo_store.put_slo(engine, spec, scenario.start)
    _pre_roll(engine, scenario, batch, run_from)
    base, parts_base = _count(engine, requests), _count(engine, request_parts)
    feed = _Feed(batch, run_from, MetricsSink(histograms=False))
    parallel = any(d.mix.parallel is not None for d in scenario.deployments)
    with ExitStack() as stack:
        running = stack.enter_context(
            nodes(engine, scenario, workdir / "spool", feed.metrics, lambda: tick[0])
        )
        sink = OtlpSink(
            lambda i: f"http://127.0.0.1:{running[i].sidecar.http.port}/v1/traces",
            client=ClientSpans() if cell.client else None,
            # With parallel sampling: no timed export in the middle of a request's sequences.
            schedule_delay_s=3600.0 if parallel else 0.2,
        )
        stack.callback(sink.close)
        while now[0] < run_end:
            end = min(now[0] + timedelta(seconds=INTERVAL_S), run_end)
            feed.spans(sink, end)
            feed.sample(running, now[0], end, tick)
            _wait_landed(running, feed.fed, feed.samples, cell.name)
            now[0] = end
            jobs.tick_evaluation()
            jobs.tick_delivery()
        if sink.failed:
            raise RuntimeError(f"{cell.name}: {sink.failed} span exports failed")
    stored = _count(engine, requests) - base
    parts, parts_sent = _count(engine, request_parts) - parts_base, feed.fed_parts()
    sent = feed.fed - parts_sent  # users' requests: a prefill leg is part of one
    seen = _seen(engine, app, cell, run_from)
    wall = time.perf_counter() - started
    problems = judge(cell, seen, sent, stored)
    if parts != parts_sent:
        problems += (f"{parts} prefill legs stored for {parts_sent} sent",)
    lora = any(d.lora is not None for d in scenario.deployments)
    problems += _truth_problems(engine, feed, run_from, per_adapter=lora)
    return CellOutcome(cell, seen, sent, stored, wall, problems)


def _shipped(sidecar: Sidecar) -> tuple[float, float]:
    """(request records, samples of every kind) the sidecar's shipper has stored so far."""
    records = samples = 0.0
    for family in sidecar.metrics.shipped.collect():
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            if sample.labels.get("kind") == "record":
                records += sample.value
            else:
                samples += sample.value
    return records, samples


def _wait_landed(running: Mapping[str, _Node], records: int, samples: int, name: str) -> None:
    """Until the sidecars' shippers report the interval stored (their own counters, so that
    waiting does not scan the store while they write to it)."""
    deadline = time.monotonic() + LAND_TIMEOUT_S
    while True:
        shipped = [_shipped(node.sidecar) for node in running.values()]
        if sum(r for r, _ in shipped) >= records and sum(s for _, s in shipped) >= samples:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: the interval did not reach the store")
        time.sleep(0.02)


def _seen(engine: Engine, app: Any, cell: Cell, run_from: datetime) -> tuple[Seen, ...]:
    pages: dict[int, Mapping[str, Any]] = {}
    for m in sorted(Outbox(engine).messages(), key=lambda m: m.id):
        payload = json.loads(m.payload)
        if payload["event"] == "trigger":
            pages.setdefault(int(payload["incident"]), payload["diagnosis"])
    onset = run_from + timedelta(seconds=min((f.start_s for f in cell.faults), default=0.0))
    with TestClient(app, base_url="http://localhost") as client:
        answer = client.get("/api/v1/incidents", params={"state": "all", "limit": 1000})
        answer.raise_for_status()
        alerts = answer.json()["incidents"]
    seen = []
    for a in sorted(alerts, key=lambda a: a["opened_at"]):
        opened = datetime.fromisoformat(a["opened_at"].replace("Z", "+00:00"))
        seen.append(
            Seen(
                int(a["id"]),
                a["slo"],
                a["scope"],
                (opened - onset).total_seconds(),
                pages.get(int(a["id"]), {}),
                a.get("diagnosis") or {},
                str(a.get("state")),
            )
        )
    return tuple(seen)


# -- Judging ------------------------------------------------------------------------------------


def expected_causes(fault: Injected, gpu: bool) -> tuple[str, ...]:
    """What a right diagnosis of ``fault`` names, given what telemetry there is."""
    return (fault.cause if gpu else EXPECTED_CAUSE_WITHOUT_GPU[fault.kind],)


def _names(d: Mapping[str, Any], causes: Sequence[str], fault: Injected) -> bool:
    """Whether ``d`` names one of ``causes`` where ``fault`` is (``scenarios.right_instance``:
    a pool fault on any decode instance of its deployment, or the whole scope)."""
    where = str(d.get("instance") or "")
    return d.get("cause") in causes and scenarios.right_instance(fault.kind, fault.instance, where)


def _top_two(d: Mapping[str, Any]) -> list[tuple[str, str]]:
    out = [(str(d.get("cause")), str(d.get("instance") or ""))]
    for alt in d.get("alternatives", [])[:1]:
        out.append((str(alt.get("cause")), str(alt.get("instance") or d.get("instance") or "")))
    return out


def judge(cell: Cell, seen: Sequence[Seen], sent: int, stored: int) -> tuple[str, ...]:
    """What is wrong with a cell (empty: it passed)."""
    problems: list[str] = []
    if stored != sent:
        problems.append(f"{stored} records stored for {sent} requests")
    if not cell.faults:
        problems.extend(f"incident on a quiet day: {s.slo} ({s.scope})" for s in seen)
        return tuple(problems)
    if not seen:
        return (*problems, "no incident opened")
    # Whether an incident resolved is reported, not judged: the policy may rightly hold a
    # ticket while the long windows still burn (a 5-minute total loss keeps a 2 h window of a
    # 99.9 % SLO above 3× for over an hour).
    problems.extend(f"{s.slo}: opened without a page" for s in seen if not s.paged)
    if len(cell.faults) == 1:
        problems.extend(_judge_single(cell, seen))
    else:
        problems.extend(_judge_overlap(cell, seen))
    return tuple(problems)


def _judge_single(cell: Cell, seen: Sequence[Seen]) -> list[str]:
    [fault] = cell.faults
    wanted = expected_causes(fault, cell.gpu)
    fallback = not cell.gpu and fault.kind in GPU_EVIDENCED
    problems = []
    for s in seen:
        for when, d in (("page", s.paged), ("after clearing", s.final)):
            if not _names(d, wanted, fault):
                problems.append(
                    f"{s.slo} {when}: {d.get('cause')} on {d.get('instance') or '-'} "
                    f"(want {'|'.join(wanted)} on {fault.instance})"
                )
            elif fallback and not d.get("missing_evidence"):
                problems.append(f"{s.slo} {when}: fallback without missing_evidence")
        if s.paged.get("cause") != s.final.get("cause"):
            problems.append(f"{s.slo}: cause changed after clearing")
    return problems


def _judge_overlap(cell: Cell, seen: Sequence[Seen]) -> list[str]:
    """Every fault is the page-time cause of some incident, and every incident blames one
    injected fault on that fault's own instance, at its page and after clearing."""
    problems = []
    for fault in cell.faults:
        wanted = expected_causes(fault, cell.gpu)
        if not any(_names(s.paged, wanted, fault) for s in seen):
            problems.append(f"{fault.cause} on {fault.instance}: no incident paged with it")
    for s in seen:
        for when, d in (("page", s.paged), ("after clearing", s.final)):
            if not any(_names(d, expected_causes(f, cell.gpu), f) for f in cell.faults):
                problems.append(f"{s.slo} {when}: {d.get('cause')} on {d.get('instance') or '-'}")
    return problems


# -- Running and the table ----------------------------------------------------------------------


def run_one(cell: Cell, store: str | None = None, pre_roll_s: float = PRE_ROLL_S) -> CellOutcome:
    with scratch_store(store, "matrix.db") as (engine, tmp):
        return run_cell(engine, cell, tmp, pre_roll_s)


def _short(d: Mapping[str, Any]) -> str:
    if not d:
        return "-"
    where = d.get("instance") or "*"
    return f"{d.get('cause')}@{where} {float(d.get('confidence', 0.0)):.2f}"


def progress_line(o: CellOutcome) -> str:
    first = o.seen[0] if o.seen else None
    page = _short(first.paged) if first else "no incident"
    verdict = "PASS" if o.passed else f"FAIL ({len(o.problems)}: {o.problems[0]})"
    return f"cell {o.cell.name:46} {page:34} {o.sent:7d} requests {o.wall_s:6.1f} s {verdict}"


HEADER: Final = (
    f"{'cell':46} {'expected':34} {'incidents':>9} {'page-time cause (first)':34} "
    f"{'+20 min after clearing':34} {'resolved':>8} result"
)


def row(o: CellOutcome) -> str:
    c = o.cell
    expected = (
        ",".join(f"{'|'.join(expected_causes(f, c.gpu))}@{f.instance}" for f in c.faults)
        or "no incident"
    )
    first = o.seen[0] if o.seen else None
    page = _short(first.paged) if first else "-"
    final = _short(first.final) if first else "-"
    resolved = f"{sum(s.state == 'resolved' for s in o.seen)}/{len(o.seen)}" if o.seen else "-"
    verdict = "PASS" if o.passed else "FAIL: " + "; ".join(dict.fromkeys(o.problems))
    return (
        f"{c.name:46} {expected:34} {len(o.seen):9d} {page:34} {final:34} {resolved:>8} {verdict}"
    )


def table(outcomes: Sequence[CellOutcome]) -> str:
    lines = [HEADER, *(row(o) for o in outcomes)]
    lines.append("")
    lines.append(summary(outcomes))
    fallbacks = [o for o in outcomes if not o.cell.gpu and o.seen]
    if fallbacks:
        lines.append("")
        lines.append("GPU telemetry off — the page's cause and its missing evidence:")
        for o in fallbacks:
            d = o.seen[0].paged
            missing = "; ".join(d.get("missing_evidence", [])) or "(none listed)"
            lines.append(f"  {o.cell.name:46} {_short(d):34} {missing}")
    return "\n".join(lines)


def summary(outcomes: Sequence[CellOutcome]) -> str:
    single = [o for o in outcomes if o.cell.family in ("single", "low-traffic")]
    quiet = [o for o in outcomes if o.cell.family == "quiet"]
    overlap = [o for o in outcomes if o.cell.family == "overlap"]

    def page_right(o: CellOutcome) -> bool:
        [f] = o.cell.faults
        wanted = expected_causes(f, o.cell.gpu)
        return bool(o.seen) and all(_names(s.paged, wanted, f) for s in o.seen)

    def kept(o: CellOutcome) -> bool:
        return bool(o.seen) and all(s.paged.get("cause") == s.final.get("cause") for s in o.seen)

    def resolved(o: CellOutcome) -> bool:
        return bool(o.seen) and all(s.state == "resolved" for s in o.seen)

    rows = [
        ("top-1 right at page time (single faults)", sum(map(page_right, single)), len(single)),
        ("cause unchanged 20 min after clearing", sum(map(kept, single)), len(single)),
        (
            "incidents resolved after clearing",
            sum(map(resolved, single + overlap)),
            len(single) + len(overlap),
        ),
        ("no incident on quiet days", sum(not o.seen for o in quiet), len(quiet)),
        ("overlapping faults each on its instance", sum(o.passed for o in overlap), len(overlap)),
        ("cells passing every check", sum(o.passed for o in outcomes), len(outcomes)),
    ]
    return "\n".join(f"{label + ':':42} {n}/{total}" for label, n, total in rows)


def rejudged(document: Sequence[Mapping[str, Any]]) -> list[CellOutcome]:
    """Outcomes read back from ``--json`` output and judged again (the table of a past run
    under the current expectations): cells are matched by name."""
    cells = {c.name: c for c in [*matrix_cells(), *quick_cells()]}
    out = []
    for item in document:
        cell = cells[item["cell"]]
        seen = tuple(Seen(**s) for s in item["incidents"])
        sent, stored = int(item["sent"]), int(item["stored"])
        problems = judge(cell, seen, sent, stored)
        out.append(CellOutcome(cell, seen, sent, stored, float(item["wall_s"]), problems))
    return out


def incidents_table(outcomes: Sequence[CellOutcome]) -> str:
    lines = [f"{'cell':46} {'slo':16} {'opened':>7}  page → +20 min after clearing (state)"]
    for o in outcomes:
        for s in o.seen:
            lines.append(
                f"{o.cell.name:46} {s.slo:16} {s.opened_s:6.0f}s  {_short(s.paged)} → "
                f"{_short(s.final)} ({s.state})"
            )
    return "\n".join(lines)
