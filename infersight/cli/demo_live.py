"""The live demo's moving parts, started and stopped as one: fleet, sidecars, API.

``LiveDemo`` wires the real components together in one process, the way they run in a
deployment, each on its own free port:

* the simulated fleet (``simulator.serve.FleetServer``): one OpenAI-compatible server per
  instance, with vLLM-style ``/metrics`` and dcgm-exporter-style ``/dcgm/metrics``, whose
  finished requests leave as OTLP spans through the real ``opentelemetry-sdk`` exporters;
* one sidecar per instance (``collector.sidecar.Sidecar``) receiving those spans, scraping its
  server's ``/metrics`` and GPU metrics, spooling to disk and shipping to the store;
* the API with its jobs and the dashboard (``api.create_app`` under uvicorn).

Before the fleet starts, ``backfill`` plays a stretch of healthy history into the store in
virtual time, so that charts have a past and SLO windows and diagnoses have a baseline.
``stop`` takes everything down in data-flow order (traffic, then sidecars draining their
spools, then the API), leaving no thread behind.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn

from infersight.api import create_app
from infersight.api.serving import limits_of
from infersight.api.settings import ApiSettings
from infersight.cli.settings import Settings
from infersight.collector.gpu.source import build_gpu_sampler
from infersight.collector.periodic import Sampler
from infersight.collector.scrape.scraper import Scraper
from infersight.collector.sidecar import Sidecar, SidecarConfig
from infersight.core.burn import Incident
from infersight.core.errors import ConfigurationError, Unavailable
from infersight.core.slo import SloSpec
from infersight.core.window import Window
from infersight.service.admin import stored_requests
from infersight.service.incidents import annotate, list_incidents
from infersight.service.ingest import open_writer
from infersight.service.slos import put_slos
from infersight.simulator.events import Batch
from infersight.simulator.fleet import Progress, run_scenario
from infersight.simulator.scenario import Scenario
from infersight.simulator.serve import FleetServer
from infersight.simulator.sinks import Sink
from infersight.simulator.sinks.otlp import OtlpSink
from infersight.simulator.sinks.store import StoreSink

if TYPE_CHECKING:
    from infersight.service.store import Store

log = logging.getLogger(__name__)
#: The demo evaluates SLOs often so that an incident shows within seconds of its burn.
EVALUATION_INTERVAL_S = 5.0
SCRAPE_INTERVAL_S = 5.0
GPU_INTERVAL_S = 2.0
#: The most firing incidents the progress line reads.
MAX_FIRING = 500


@dataclass(frozen=True, slots=True)
class DemoStatus:
    """What the progress line shows."""

    elapsed_s: float
    served: int
    stored: int
    firing: tuple[Incident, ...]


class _Relay:
    """Holds the fleet's output until the sidecars listen, then passes it on.

    The fleet must start first (the sidecars scrape its ports) but produces requests at once;
    its early batches wait here instead of racing the sidecars' start.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[Batch] = []
        self._target: Sink | None = None

    def connect(self, target: Sink) -> None:
        with self._lock:
            self._target = target
            pending, self._pending = self._pending, []
            for batch in pending:
                target.write(batch)

    def write(self, batch: Batch) -> None:
        with self._lock:
            if self._target is None:
                self._pending.append(batch)
            else:
                self._target.write(batch)

    def close(self) -> None:
        with self._lock:
            if self._target is not None:
                self._target.close()
            self._pending.clear()


class _Cancelled(Exception):
    """Raised from the backfill's progress callback when the demo is asked to stop."""


def check_listen(host: str, port: int) -> None:
    """Refuse an API address that is taken (a demo already running there, say) before the
    demo changes anything."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigurationError(
                f"the API cannot listen on {host}:{port}: {exc.strerror}"
            ) from None


def shift_faults(scenario: Scenario, first_s: float) -> Scenario:
    """The scenario with every fault moved by the same amount so that the first starts at
    ``first_s`` seconds (the demo's time compression)."""
    if not scenario.faults:
        return scenario
    delta = first_s - min(f.start_s for f in scenario.faults)
    faults = tuple(
        dataclasses.replace(f, start_s=f.start_s + delta, end_s=f.end_s + delta)
        for f in scenario.faults
    )
    return dataclasses.replace(scenario, faults=faults)


class LiveDemo:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        scenario: Scenario,
        slos: list[SloSpec],
        *,
        host: str = "127.0.0.1",
        port: int = 8080,
        spool_root: Path | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.settings = settings
        self.scenario = scenario
        self.slos = slos
        self.host, self.port = host, port
        self._clock = clock
        self._spool_root = spool_root
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.fleet: FleetServer | None = None
        self.sidecars: dict[str, Sidecar] = {}
        self._relay = _Relay()
        self._api: uvicorn.Server | None = None
        self._api_thread: threading.Thread | None = None
        self._started = time.monotonic()
        self.url = ""
        self._history: Window | None = None

    # -- before the fleet ----------------------------------------------------------------

    def check_listen(self) -> None:
        """Fail before the backfill, not after, when the API's address is taken."""
        check_listen(self.host, self.port)

    def apply_slos(self) -> list[str]:
        put_slos(self.store, self.slos, self._clock())
        return [spec.name for spec in self.slos]

    def backfill(
        self,
        history_s: float,
        stop: threading.Event,
        progress: Callable[[Progress], None] | None = None,
    ) -> int:
        """Play ``history_s`` of the fleet without faults, ending now, into the store; the
        number of requests written (0 when interrupted by ``stop``)."""
        if history_s <= 0:
            return 0
        start = self._clock() - timedelta(seconds=history_s)
        self._history = Window(start, start + timedelta(seconds=history_s))
        past = dataclasses.replace(
            self.scenario,
            start=start,
            duration_s=history_s,
            faults=(),
            seed=self.scenario.seed + 1,  # trace ids must not repeat the live fleet's
        )
        sink = StoreSink(open_writer(self.store))

        def report(p: Progress) -> None:
            if stop.is_set():
                raise _Cancelled
            if progress is not None:
                progress(p)

        try:
            result = run_scenario(past, [sink], chunk_s=60.0, progress=report)
        except _Cancelled:
            return 0
        finally:
            sink.close()
        return result.requests

    def history_window(self, history_s: float) -> Window:
        """What ``backfill`` played, else the last ``history_s`` before now: the window the
        demo's baseline is captured from."""
        if self._history is not None:
            return self._history
        end = self._clock()
        return Window(end - timedelta(seconds=history_s), end)

    # -- start and stop ------------------------------------------------------------------

    def start(self) -> str:
        """Start fleet, sidecars and API; the dashboard's URL."""
        self._started = time.monotonic()
        self.fleet = FleetServer(self.scenario, epoch=self._clock(), sinks=[self._relay])
        urls = self.fleet.start()
        root = self._spool_root
        if root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="infersight-demo-")
            root = Path(self._tmp.name)
        models = {n: d.profile.model_name for d in self.scenario.deployments for n in d.instances}
        for name, url in urls.items():
            self.sidecars[name] = self._sidecar(name, models[name], url, root / name).start()
        ports = {name: sidecar.http.port for name, sidecar in self.sidecars.items()}
        self._relay.connect(
            OtlpSink(lambda i: f"http://127.0.0.1:{ports[i]}/v1/traces", flush_on_write=False)
        )
        self.url = self._start_api()
        return self.url

    def _sidecar(self, name: str, model: str, server_url: str, spool: Path) -> Sidecar:
        config = SidecarConfig(name, spool, http_port=0, grpc_port=0, model=model)
        scraper = Scraper(f"{server_url}/metrics", name, SCRAPE_INTERVAL_S, 2.0)
        gpu = build_gpu_sampler(f"dcgm:{server_url}/dcgm/metrics", name, GPU_INTERVAL_S)
        samplers: list[Sampler] = [scraper] if gpu is None else [scraper, gpu]
        return Sidecar(
            config,
            open_writer(self.store),
            samplers,
            scraped_model=scraper.current_model,
            scraped_adapters=scraper.current_adapters,
        )

    def _start_api(self) -> str:
        api_settings = ApiSettings(
            listen=f"{self.host}:{self.port}", evaluation_interval_s=EVALUATION_INTERVAL_S
        )
        app = create_app(
            api_settings,
            self.store,
            retention=self.settings.retention(),
            exact_max_rows=self.settings.exact_max_rows,
        )
        config = uvicorn.Config(
            app,
            host=self.host,
            port=self.port,
            log_level="warning",
            ws="none",
            lifespan="on",
            **limits_of(api_settings).uvicorn_options(),
        )
        self._api = uvicorn.Server(config)
        self._api_thread = threading.Thread(target=self._api.run, name="demo-api", daemon=True)
        self._api_thread.start()
        deadline = time.monotonic() + 30
        while not self._api.started:
            if not self._api_thread.is_alive():
                raise ConfigurationError(
                    f"the API cannot listen on {self.host}:{self.port} (is the port taken?)"
                )
            if time.monotonic() > deadline:
                raise Unavailable("the API did not start within 30 s")
            time.sleep(0.05)
        port = self._api.servers[0].sockets[0].getsockname()[1]
        return f"http://{self.host}:{port}/"

    def stop(self) -> None:
        """Traffic first (its last spans reach the sidecars), then the sidecars drain into
        the store, then the API and its jobs. The sidecars stop scraping before the servers
        they scrape go away (a stopping demo is no scrape failure worth a warning)."""
        for sidecar in self.sidecars.values():
            for task in sidecar.tasks:
                task.stop()  # idempotent: Sidecar.stop stops them again
        if self.fleet is not None:
            self.fleet.stop()  # closes the relay, which flushes and shuts down the exporters
            self.fleet = None
        for sidecar in self.sidecars.values():
            sidecar.stop()
        self.sidecars.clear()
        if self._api is not None and self._api_thread is not None:
            self._api.should_exit = True
            self._api_thread.join(timeout=30)
            self._api = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # -- progress ------------------------------------------------------------------------

    def status(self) -> DemoStatus:
        return DemoStatus(
            elapsed_s=time.monotonic() - self._started,
            served=self._count_served(),
            stored=stored_requests(self.store),
            firing=tuple(
                listed.incident for listed in list_incidents(self.store, "firing", MAX_FIRING)
            ),
        )

    def _count_served(self) -> int:
        """Requests the fleet finished so far."""
        return self.fleet.requests if self.fleet is not None else 0

    def cause_of(self, incident: Incident) -> str | None:
        """The stored diagnosis's top cause, once the diagnosis job has written it."""
        diagnosis: Any = annotate(self.store, [incident])[incident.id]["diagnosis"]
        return diagnosis.get("cause") if isinstance(diagnosis, dict) else None
