"""Drives the phases of a run with closed-loop users on one event loop.

User ``i`` exists while the current phase has more than ``i`` users: it sends a request, waits
for the whole stream, and sends the next, so concurrency is exactly the phase's. When a phase
ends, extra users finish their request in flight and leave; new users start at once. When the
last phase ends, requests in flight are waited for (up to ``drain_s``) and then cancelled.
Each result records the phase it was sent in; summaries are ``core.loadtest``'s.

Before the clock starts, one short preflight request checks the target answers (a wrong URL
or model fails at once, not as thousands of errors) and warms the client's code paths, so
the first measured request does not pay for them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
import numpy as np

from infersight.core.errors import Unavailable
from infersight.core.loadtest import LoadTestRun, Phase, RequestResult, ScenarioKind
from infersight.loadgen.client import Endpoint, send
from infersight.loadgen.distributed import running
from infersight.loadgen.monitor import MonitorReport, SelfMonitor
from infersight.loadgen.progress import NoProgress, Progress
from infersight.loadgen.workload import Workload, prompt

PREFLIGHT_TOKENS = 8


class Runner:
    def __init__(
        self,
        endpoint: Endpoint,
        phases: Sequence[Phase],
        workload: Workload,
        *,
        rng: np.random.Generator | None = None,
        progress: Progress | None = None,
        monitor: SelfMonitor | None = None,
        request_timeout_s: float = 600.0,
        drain_s: float = 60.0,
        clock: Callable[[], float] = time.perf_counter,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._endpoint, self._phases, self._workload = endpoint, tuple(phases), workload
        self._rng = rng or np.random.default_rng()
        self._progress = progress or NoProgress()
        self._monitor = monitor or SelfMonitor()
        self._timeout, self._drain = request_timeout_s, drain_s
        self._clock, self._wall_clock = clock, wall_clock
        self._phase = self._phases[0]
        self._stopping = False
        self._results: list[RequestResult] = []
        self._errors = 0
        self._seq = 0
        self._t0 = 0.0
        self.monitor_report = MonitorReport()

    async def run(
        self, *, name: str, scenario: ScenarioKind, config: Mapping[str, Any] | None = None
    ) -> LoadTestRun:
        users = max(p.concurrency for p in self._phases)
        limits = httpx.Limits(max_connections=users, max_keepalive_connections=users)
        timeout = httpx.Timeout(self._timeout, connect=min(self._timeout, 30.0))
        async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
            await self._preflight(client)
            self._monitor.start()
            started_at, self._t0 = self._wall_clock(), self._clock()
            try:
                await self._drive(client)
            finally:  # a cancelled run (the demo's Ctrl-C) stops its sampler too
                self.monitor_report = await self._monitor.stop()
        self._progress.close()
        results = sorted(self._results, key=lambda r: r.seq)
        return LoadTestRun(
            name=name,
            scenario=scenario,
            target=self._endpoint.display_url,
            model=self._endpoint.model,
            started_at=started_at,
            phases=self._phases,
            results=tuple(results),
            warnings=tuple(self.monitor_report.warnings),
            config={**(config or {}), "generator": self.monitor_report.to_dict()},
        )

    async def _preflight(self, client: httpx.AsyncClient) -> None:
        await preflight(client, self._endpoint, self._rng, self._clock)

    async def _drive(self, client: httpx.AsyncClient) -> None:
        users: dict[int, asyncio.Task[None]] = {}
        ticker = asyncio.create_task(self._tick())
        try:
            for phase in self._phases:
                self._phase = phase
                for i in range(phase.concurrency):
                    if i not in users or users[i].done():
                        users[i] = asyncio.create_task(self._user(i, client))
                await asyncio.sleep(max(0.0, self._t0 + phase.end_s - self._clock()))
            self._stopping = True
            pending = [t for t in users.values() if not t.done()]
            if pending:
                _, late = await asyncio.wait(pending, timeout=self._drain)
                for task in late:
                    task.cancel()
                await asyncio.gather(*late, return_exceptions=True)
        finally:
            # Cancelled mid-run (Ctrl-C): no user outlives the run, or its client.
            left = [t for t in users.values() if not t.done()]
            for task in (ticker, *left):
                task.cancel()
            await asyncio.gather(ticker, *left, return_exceptions=True)

    async def _user(self, slot: int, client: httpx.AsyncClient) -> None:
        while not self._stopping:
            # The clock, not only the driver's wake-up, says which phase a request is sent in:
            # a stream that ends as a phase ends is not followed by a request the phase has no
            # room for, nor by one after the last phase (the driver may wake a moment later).
            # Of the clock's phase and the driver's, the later one counts.
            now = self._clock()
            phase = running(self._phases, now - self._t0)
            if phase is None:
                break
            if phase.index < self._phase.index:
                phase = self._phase
            if slot >= phase.concurrency:
                break
            shape = self._workload.next()
            self._seq += 1
            result = await send(
                client,
                self._endpoint,
                prompt(shape.input_tokens, self._rng),
                input_tokens=shape.input_tokens,
                max_tokens=shape.output_tokens,
                seq=self._seq,
                phase=phase.index,
                t0=self._t0,
                clock=self._clock,
                sent=now,
            )
            self._results.append(result)
            self._errors += not result.ok
            self._show()

    async def _tick(self) -> None:
        while True:
            self._show()
            await asyncio.sleep(0.5)

    def _show(self) -> None:
        elapsed = self._clock() - self._t0
        self._progress.update(elapsed, self._phase.label, len(self._results), self._errors)


async def preflight(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    rng: np.random.Generator,
    clock: Callable[[], float] = time.perf_counter,
) -> None:
    """One short request; ``Unavailable`` when the target does not answer it."""
    t0 = clock()
    words = prompt(PREFLIGHT_TOKENS, rng)
    result = await send(
        client,
        endpoint,
        words,
        input_tokens=PREFLIGHT_TOKENS,
        max_tokens=2,
        seq=0,
        phase=0,
        t0=t0,
        clock=clock,
    )
    if not result.ok:
        raise Unavailable(
            "the target did not answer a first test request",
            details={"url": endpoint.display_url, "error": result.error},
        )
