"""A whole scenario fleet in real time: one OpenAI-compatible server per instance.

Each instance of the scenario runs its engine against the wall clock with the scenario's own
traffic and faults (times counted from when the fleet starts), and serves HTTP on its own
port (``/v1/chat/completions``, ``/v1/completions``, ``/metrics``, ``/dcgm/metrics``), so load
generators and sidecars can use it like a real deployment. The servers run on an event loop
in a background thread (signals stay with the caller); ``stop`` shuts them down cleanly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime

import uvicorn

from infersight.core.errors import InvalidInput, Unavailable
from infersight.simulator.fleet import build_instances
from infersight.simulator.hostlimits import HostLimits
from infersight.simulator.realtime import RealtimeServer
from infersight.simulator.scenario import Scenario
from infersight.simulator.sinks import Sink


class FleetServer:
    def __init__(
        self,
        scenario: Scenario,
        *,
        epoch: datetime,
        host: str = "127.0.0.1",
        base_port: int = 0,
        sinks: Sequence[Sink] = (),
        clock: Callable[[], float] = time.monotonic,
        host_limits: Callable[[], HostLimits] | None = None,
    ) -> None:
        if any(d.engines > 1 for d in scenario.deployments):
            raise InvalidInput("real-time serving runs one engine per instance")
        self.scenario = dataclasses.replace(scenario, start=epoch)
        self._host, self._base_port = host, base_port
        self._sinks = list(sinks)
        self._clock = clock
        #: Builds each instance's real host-side limits (``simulator.hostlimits``).
        self._host_limits = host_limits
        self.servers: list[RealtimeServer] = []
        self.urls: dict[str, str] = {}
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout_s: float = 20.0) -> dict[str, str]:
        """Start every instance; returns instance → base URL."""
        self._thread = threading.Thread(target=self._run, name="sim-fleet", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s) or self._error is not None:
            self.stop()
            raise Unavailable(
                "the simulated fleet did not start", details={"error": str(self._error)}
            )
        return dict(self.urls)

    def stop(self, timeout_s: float = 20.0) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def requests(self) -> int:
        return sum(s.served for s in self.servers)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to start(); the thread must not die silently
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        sims = build_instances(self.scenario)
        self.servers = [
            RealtimeServer(
                sim,
                clock=self._clock,
                sinks=self._sinks,
                close_sinks=False,
                host_limits=self._host_limits() if self._host_limits else None,
            )
            for sim in sims
        ]
        servers = []
        for i, server in enumerate(self.servers):
            port = self._base_port + i if self._base_port else 0
            config = uvicorn.Config(
                server.app(), host=self._host, port=port, log_level="warning", ws="none"
            )
            servers.append(uvicorn.Server(config))
        tasks = [asyncio.create_task(s.serve()) for s in servers]
        try:
            while not all(s.started for s in servers):
                if any(t.done() for t in tasks):
                    raise Unavailable("a simulated server failed to start")
                await asyncio.sleep(0.01)
            for server, uv in zip(self.servers, servers, strict=True):
                port = uv.servers[0].sockets[0].getsockname()[1]
                self.urls[server.name] = f"http://{self._host}:{port}"
            self._ready.set()
            await self._stop.wait()
        finally:
            for uv in servers:
                uv.should_exit = True
            await asyncio.gather(*tasks, return_exceptions=True)
            for sink in self._sinks:
                sink.close()
