"""Is the generator itself the bottleneck? Its event loop's lag and CPU share, sampled.

A closed-loop generator on one event loop times every token by when the loop gets round to
reading it. When the loop is busy (too many users for one process, slow parsing, a CPU-starved
host) reads come late, so TTFT and TPOT grow for reasons that are not the server's. A sampler
asks to wake every ``interval`` and records how late it woke (scheduling lag), and the loop
thread's CPU time over wall time (a share near one core means the loop is saturated).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

LAG_LIMIT_S: Final = 0.02
CPU_LIMIT: Final = 0.9


@dataclass
class MonitorReport:
    samples: int = 0
    lag_p99_s: float = 0.0
    lag_max_s: float = 0.0
    cpu_share: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, float | int]:
        return {
            "samples": self.samples,
            "loop_lag_p99_s": self.lag_p99_s,
            "loop_lag_max_s": self.lag_max_s,
            "cpu_share": self.cpu_share,
        }


class SelfMonitor:
    """Samples the running loop until stopped; ``report()`` judges the samples."""

    def __init__(
        self,
        interval_s: float = 0.05,
        *,
        lag_limit_s: float = LAG_LIMIT_S,
        cpu_limit: float = CPU_LIMIT,
        clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self._interval = interval_s
        self._lag_limit, self._cpu_limit = lag_limit_s, cpu_limit
        self._clock, self._cpu_clock = clock, cpu_clock
        self._lags: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._wall0 = self._cpu0 = 0.0
        self._wall = self._cpu = 0.0

    def start(self) -> None:
        self._wall0, self._cpu0 = self._clock(), self._cpu_clock()
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def stop(self) -> MonitorReport:
        self._wall = self._clock() - self._wall0
        self._cpu = self._cpu_clock() - self._cpu0
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return self.report()

    async def _sample(self) -> None:
        while True:
            due = self._clock() + self._interval
            await asyncio.sleep(self._interval)
            self._lags.append(max(0.0, self._clock() - due))

    def report(self) -> MonitorReport:
        lags = sorted(self._lags)
        return judge(
            samples=len(lags),
            lag_p99_s=lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else 0.0,
            lag_max_s=lags[-1] if lags else 0.0,
            cpu_share=self._cpu / self._wall if self._wall > 0 else 0.0,
            lag_limit_s=self._lag_limit,
            cpu_limit=self._cpu_limit,
        )


def judge(
    *,
    samples: int,
    lag_p99_s: float,
    lag_max_s: float,
    cpu_share: float,
    lag_limit_s: float = LAG_LIMIT_S,
    cpu_limit: float = CPU_LIMIT,
    who: str = "the load generator",
) -> MonitorReport:
    """A report of what a sampler saw, with a warning for each limit passed.

    Shared by this monitor and the Locust workers' (a gevent loop is judged the same way).
    """
    report = MonitorReport(samples, lag_p99_s, lag_max_s, cpu_share)
    if lag_p99_s > lag_limit_s:
        report.warnings.append(
            f"{who} may be the bottleneck: its event loop woke up to "
            f"{lag_max_s * 1e3:.0f} ms late (p99 {lag_p99_s * 1e3:.0f} ms), "
            "so client timings carry that much error; run fewer users per generator"
        )
    if cpu_share > cpu_limit:
        report.warnings.append(
            f"{who} may be the bottleneck: its event loop used "
            f"{cpu_share:.0%} of a CPU core; split the load over more processes"
        )
    return report
