"""The sidecar assembled: spool, receivers, shipper and samplers, started and stopped as one.

Start-up order: the spool opens and both receivers bind and accept first; the store writer
(SQLAlchemy, the database driver, the rollup math: most of a cold start) is built afterwards in
the shipper's thread when ``sink`` is given as a factory, so a restarted sidecar acknowledges
exports within its exporters' retry budget whatever the store's libraries cost to load, and
whether or not the store answers.

``/healthz`` says ``"status": "ok"`` or why not: ``"degraded: cannot ship since …"`` with the
last error, ``"degraded: store slow: …"`` (the ship lag is over ``ship_lag_bound_s``, or one
pass has waited that long on the store), ``"degraded: spool disk full, …"`` / ``"spool at
max_bytes"`` (new exports are refused). It answers from memory, and 200 in every case: a
sidecar waiting for its store is alive and accepting (it spools), so neither a liveness nor a
readiness probe should act on it (a failing readiness probe would take the inference server's
pod out of its Service). ``/healthz?strict=1`` answers 503 while degraded, for monitors that
read only the status code.

``Sidecar.stop`` is the clean shutdown: receivers stop taking exports, pending appends are
committed, samplers stop, the shipper drains what is eligible, then the spool closes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from infersight.collector.admission import Admission, AdmissionConfig
from infersight.collector.assembly import Reassembly
from infersight.collector.auth import check_bind
from infersight.collector.decoding import DecoderPool
from infersight.collector.grpc_receiver import GrpcServer
from infersight.collector.http_receiver import HttpServer, create_app
from infersight.collector.ingest import Ingestor
from infersight.collector.mapping import MappingContext
from infersight.collector.metrics import CollectorMetrics
from infersight.collector.otlp import Limits
from infersight.collector.peers import log as peers_log
from infersight.collector.peers import shown
from infersight.collector.periodic import PeriodicTask, Sampler
from infersight.collector.roles import RoleSource
from infersight.collector.shipper import Backoff, Shipper, ShipPolicy
from infersight.collector.spool import AT_MAX_BYTES, DISK_FULL, FsyncMode, Spool, SpoolConfig
from infersight.core.accept import AcceptWindow
from infersight.core.attribution import AttributionMap
from infersight.core.errors import ConfigurationError
from infersight.core.records import Role
from infersight.core.write import Sink

log = logging.getLogger(__name__)


def _scrape_target(sampler: Sampler) -> str:
    """What a scraper reads, as logged: its URL without credentials or query."""
    url = str(getattr(sampler, "url", "") or sampler.name)
    parts = urlsplit(url)
    if parts.scheme and parts.hostname:
        netloc = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
        url = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    return shown(url)


#: How ``/healthz`` names the spool's refusals.
_REFUSALS = {DISK_FULL: "spool disk full", AT_MAX_BYTES: "spool at max_bytes"}
#: Longest the store writer waits for a first export before it is built anyway.
OPEN_DELAY_S = 5.0


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    instance: str
    spool_dir: Path
    http_host: str = "127.0.0.1"
    http_port: int = 4318
    grpc_host: str = "127.0.0.1"
    grpc_port: int = 4317
    model: str = ""
    service_models: Mapping[str, str] = field(default_factory=dict)
    token: str | None = None
    insecure_no_auth: bool = False
    fsync: FsyncMode = FsyncMode.GROUP
    group_window_s: float = 0.02
    spool_max_bytes: int = 1 << 30
    #: Disk kept free for draining the spool (``SpoolConfig.reserve_bytes``; ``None``: a
    #: 16th of the spool's filesystem, within 256 KiB … 16 MiB).
    spool_reserve_bytes: int | None = None
    window_s: float = 2.0
    #: The instance's part in disaggregated prefill/decode serving (``MappingContext.role``):
    #: declared (``--role``), or ``None``: read from the server's /metrics by the scraper
    #: (``collector.roles``), unified until a scrape names one.
    role: Role | None = None
    #: With no role declared, seconds exports wait for the first scrape to name one
    #: (``collector.roles``; 0: none wait, the role is unified until named).
    role_wait_s: float = 0.0
    #: The reassembly window once the server's /metrics name the decode role (``None``:
    #: ``window_s`` whatever the role); for a window not given, as ``--role decode`` has.
    decode_window_s: float | None = None
    #: LoRA adapters this instance serves (``--adapter``): a span naming one is a request of
    #: the base model with that adapter (``MappingContext.attribute``). A vLLM server's
    #: /metrics name its adapters too, and are read besides.
    adapters: tuple[str, ...] = ()
    #: Which attributes of gateway and client spans name who a trace's requests are for
    #: (``core.attribution``: ``--attribution`` / ``INFERSIGHT_ATTRIBUTION``); ``None``: only
    #: a client span's own tenant attribute names one.
    attribution: AttributionMap | None = None
    #: Least time from the start of a shipping pass that stored records to the next pass,
    #: while the spool holds less than a batch. Each such pass costs the store writer a fixed
    #: ~10 ms of CPU (transaction, partitions, rollups), so at most one every 2 s bounds that
    #: at high export rates. A pass starts as soon as the oldest record's reassembly window
    #: ends, within that bound, so
    #: records reach the store ``window_s`` after their acknowledgement when exports come in
    #: large batches (the SDK's default), and within ``window_s`` + ``ship_interval_s``
    #: (4 s by default) when many small exports arrive.
    ship_interval_s: float = 2.0
    #: Least time between two shipments of GPU and server samples: the store folds each
    #: batch of a GPU's samples into its rollups at a fixed cost (it reads the GPU's
    #: neighbouring samples), so five samples at once cost a fifth of one at a time.
    sample_ship_interval_s: float = 10.0
    limits: Limits = field(default_factory=Limits)
    #: Exports decoded at once and admitted to wait, shared by both receivers.
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    #: Decode bodies in child processes, one per decode slot (``collector.decoding``), so
    #: that /healthz and acknowledgements never wait on decoding and the heap it churns is
    #: not the sidecar's; ``False`` decodes in the slots' threads.
    decode_processes: bool = True
    backoff: Backoff = field(default_factory=Backoff)
    #: ``/healthz`` says "degraded: store slow" beyond this ship lag, or when one shipping
    #: pass has waited this long on the store (``None``: 30 s or five ship intervals, the
    #: longer).
    ship_lag_bound_s: float | None = None
    #: Seconds between probes of the store (``SELECT 1``) while nothing is to be shipped, so
    #: that an idle outage reads degraded and ``last_shipped_at`` stays where it was.
    store_probe_s: float = 10.0
    #: Longest a store writer given as a factory waits for the first export to be durable
    #: before it is built anyway (``ShipPolicy.open_delay_s``).
    store_open_delay_s: float = OPEN_DELAY_S
    #: Span starts outside it are refused per span (``infersight sidecar`` sets it from
    #: the raw retention and the future skew); ``None`` accepts any plausible start, for
    #: embedders replaying history in virtual time (the simulator's scenarios, benchmarks).
    accept: AcceptWindow | None = None

    def __post_init__(self) -> None:
        check_bind(self.http_host, self.token, self.insecure_no_auth)
        check_bind(self.grpc_host, self.token, self.insecure_no_auth)
        if not self.ship_interval_s > 0:
            raise ConfigurationError("the ship interval must be positive")
        if not self.sample_ship_interval_s >= 0:
            raise ConfigurationError("the sample ship interval must not be negative")
        if self.ship_lag_bound_s is not None and not self.ship_lag_bound_s > 0:
            raise ConfigurationError("the ship lag bound must be positive")
        if not self.store_probe_s >= 0:
            raise ConfigurationError("the store probe interval must not be negative")
        if not self.store_open_delay_s >= 0:
            raise ConfigurationError("the store writer's open delay must not be negative")
        if not self.role_wait_s >= 0:
            raise ConfigurationError("the role wait must not be negative")


class Sidecar:
    def __init__(
        self,
        config: SidecarConfig,
        sink: Sink | Callable[[], Sink],
        samplers: Sequence[Sampler] = (),
        scraped_model: Callable[[], str] = lambda: "",
        scraped_adapters: Callable[[], frozenset[str]] = frozenset,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.metrics = CollectorMetrics()
        self.spool = Spool(
            SpoolConfig(
                config.spool_dir,
                max_bytes=config.spool_max_bytes,
                fsync=config.fsync,
                group_window_s=config.group_window_s,
                reserve_bytes=config.spool_reserve_bytes,
            ),
            clock=clock,
        )
        context = MappingContext(
            config.instance,
            config.model,
            dict(config.service_models),
            scraped_model,
            role=config.role or Role.UNIFIED,
            adapters=frozenset(config.adapters),
            scraped_adapters=scraped_adapters,
            attribution=config.attribution,
        )
        reassembly = Reassembly(self._window_s(config.role or Role.UNIFIED))
        self.roles = RoleSource(config.role, config.role_wait_s, on_change=self._role_changed)
        self.decoders: DecoderPool | None = None
        if config.decode_processes:
            self.decoders = DecoderPool(
                config.limits, context, config.accept, reassembly,
                workers=config.admission.slots,
            )  # fmt: skip
        self.ingestor = Ingestor(
            self.spool,
            context,
            self.metrics,
            config.limits,
            reassembly,
            accept=config.accept,
            decoder=self.decoders,
            hold=self.roles.wait,
            holding=self.roles.pending,
        )
        # A sink given as a factory is built once the first export is durable, about to be
        # acknowledged (nothing leaves the spool before), or after ``store_open_delay_s``:
        # see ``Shipper._hold_open``.
        held = self.spool.stats()[0]
        self.shipper = Shipper(
            self.spool,
            sink,
            self.metrics,
            ShipPolicy(
                backoff=config.backoff,
                idle_s=config.ship_interval_s,
                samples_every_s=config.sample_ship_interval_s,
                slow_after_s=config.ship_lag_bound_s or max(30.0, 5 * config.ship_interval_s),
                probe_every_s=config.store_probe_s,
                open_delay_s=config.store_open_delay_s,
            ),
            reassembly=reassembly,
            adapters=lambda: context.adapters | context.scraped_adapters(),
            open_when=lambda: self.spool.stats()[0] != held,
            on_first_ship=self._first_ship,
        )
        self.admission = Admission(config.admission)
        self.http = HttpServer(
            create_app(self.ingestor, config.token, self._health, self.admission),
            config.http_host,
            config.http_port,
        )
        self.grpc = GrpcServer(
            self.ingestor,
            config.grpc_host,
            config.grpc_port,
            config.token,
            admission=self.admission,
        )
        self.tasks = [
            PeriodicTask(s, self.spool, self._sampler_error(s), self._sampler_success(s))
            for s in samplers
        ]
        self._stop = threading.Event()
        self._shipper_thread: threading.Thread | None = None
        #: More of ``/healthz`` (the profiler's state, ``collector.profiling``).
        self.health_parts: list[Callable[[], dict[str, Any]]] = []

    def _sampler_error(self, sampler: Sampler) -> Callable[[str], None]:
        if "gpu" in sampler.name:
            return lambda reason: self.metrics.gpu_errors.labels(reason).inc()
        target = _scrape_target(sampler)
        key = ("scrape", target)

        def failed(reason: str) -> None:
            self.metrics.scrape_errors.labels(reason).inc()
            if not self.ingestor.peers.known(key):
                line = f"no successful scrape of {target} yet: first failure: {shown(reason)}"
                self.ingestor.peers.announce(key, "scrape", line, ok=False)

        return failed

    def _sampler_success(self, sampler: Sampler) -> Callable[[int], None]:
        if "gpu" in sampler.name:
            return self.metrics.gpu_samples.inc
        recognised = ""
        target = _scrape_target(sampler)
        key = ("scrape", target)

        def scraped(count: int) -> None:
            nonlocal recognised
            self.metrics.scrapes.inc()
            dialect = str(getattr(sampler, "flavour", ""))
            said = getattr(sampler, "role", None)  # a scraper's ``flavours.ServerRole``
            if said is not None and hasattr(said, "evidence"):
                self.roles.learned(said.role, said.evidence)
            if not self.ingestor.peers.known(key):
                model = shown(str(getattr(sampler, "model", "") or "")) or "(not named)"
                line = f"first scrape of {target}: dialect {dialect or 'unknown'}, model {model}"
                self.ingestor.peers.announce(key, "scrape", line)
            if dialect and dialect != recognised:
                if recognised:
                    self.metrics.scrape_dialect.remove(sampler.name, recognised)
                self.metrics.scrape_dialect.labels(sampler.name, dialect).set(1)
                recognised = dialect

        return scraped

    def _window_s(self, role: Role) -> float:
        decode = self.config.decode_window_s
        return decode if decode is not None and role is Role.DECODE else self.config.window_s

    def _role_changed(self, role: Role) -> None:
        """Exports received from now on are mapped with ``role`` (an attribute swap: the
        receivers' slots read it once per export)."""
        ingestor = self.ingestor
        ingestor.context = replace(ingestor.context, role=role)
        window = self._window_s(role)
        if window != ingestor.reassembly.window_s:
            ingestor.reassembly = replace(ingestor.reassembly, window_s=window)

    def _first_ship(self, shipped: int) -> None:
        sink = type(self.shipper.sink).__name__
        line = f"first shipment: {shipped} entries written through {sink}"
        self.ingestor.peers.announce(("store",), "store", line)

    def _health(self) -> dict[str, Any]:
        state: dict[str, Any] = {"instance": self.config.instance, **self.shipper.health()}
        refusal = self.spool.refusal()
        state["spool"] = "ok" if refusal is None else _REFUSALS[refusal]
        state.update(self.spool.disk())
        if refusal is not None and "status" not in state:
            state["status"] = f"degraded: {_REFUSALS[refusal]}, new exports are refused"
        state["peers"] = self.ingestor.peers.health()
        for part in self.health_parts:
            state.update(part())
        state["role"] = self.roles.health()
        mapping = self.config.attribution
        if mapping is not None:  # which attributes name a trace's tenant, team, workload
            state["attribution"] = {"source": mapping.source, "rules": mapping.describe()}
        return state

    def add_samplers(self, samplers: Sequence[Sampler]) -> None:
        """Add samplers after start (the CLI builds them once the receivers listen: NVML's
        initialisation and the scrape client are not needed to accept exports)."""
        tasks = [
            PeriodicTask(s, self.spool, self._sampler_error(s), self._sampler_success(s))
            for s in samplers
        ]
        self.tasks += tasks
        if self._shipper_thread is not None:
            for task in tasks:
                task.start()

    def start(self) -> Sidecar:
        # The first-contact lines answer "does it work?": shown at the CLI's default level
        # (warnings) too, unless that logger was given a level of its own.
        if peers_log.level == logging.NOTSET:
            peers_log.setLevel(logging.INFO)
        self.http.start()
        self.grpc.start()
        if self.decoders is not None:
            self.decoders.start()  # in the background: the receivers accept already
        for task in self.tasks:
            task.start()
        self._shipper_thread = self.shipper.start(self._stop)
        log.info(
            "sidecar %s: OTLP/HTTP on %s:%d, OTLP/gRPC on %s:%d, spool %s",
            self.config.instance,
            self.http.host,
            self.http.port,
            self.grpc.host,
            self.grpc.port,
            self.spool.path,
        )
        return self

    def stop(self) -> None:
        self.http.stop()
        self.grpc.stop()
        self.admission.close()
        if self.decoders is not None:
            self.decoders.close()
        for task in self.tasks:
            task.stop()
        self._stop.set()
        if self._shipper_thread is not None:
            self._shipper_thread.join(timeout=10)
        self.shipper.drain()
        self.spool.close()
