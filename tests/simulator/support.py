"""Helpers for the simulator's tests: small single-deployment runs in virtual time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from infersight.core.records import RequestRecord
from infersight.core.samples import GpuSample, ServerSample
from infersight.simulator.faults import Fault
from infersight.simulator.fleet import RunResult, run_scenario
from infersight.simulator.profiles import ModelProfile
from infersight.simulator.scenario import Deployment, Scenario
from infersight.simulator.sinks import MemorySink
from infersight.simulator.workload import LengthDist, LengthKind, Poisson, RequestMix

START = datetime(2026, 1, 5, 9, tzinfo=UTC)
#: The short-prompt mix the profiles are calibrated on (~512 in / ~256 out).
SHORT_MIX = RequestMix(
    input=LengthDist(LengthKind.LOGNORMAL, 512, 0.5, 16, 8192),
    output=LengthDist(LengthKind.LOGNORMAL, 256, 0.5, 2, 2048),
    max_tokens=2048,
)


@dataclass
class Run:
    result: RunResult
    sink: MemorySink

    def records(
        self, instance: str | None = None, since: float = 0.0, until: float = 1e9
    ) -> list[RequestRecord]:
        lo, hi = START + timedelta(seconds=since), START + timedelta(seconds=until)
        return [
            r
            for r in self.sink.records
            if lo <= r.start < hi and (instance is None or r.instance == instance)
        ]

    def server(self, instance: str, since: float = 0.0, until: float = 1e9) -> list[ServerSample]:
        lo, hi = START + timedelta(seconds=since), START + timedelta(seconds=until)
        return [s for s in self.sink.server_samples if s.instance == instance and lo < s.ts <= hi]

    def gpu(self, instance: str, since: float = 0.0, until: float = 1e9) -> list[GpuSample]:
        lo, hi = START + timedelta(seconds=since), START + timedelta(seconds=until)
        return [s for s in self.sink.gpu_samples if s.instance == instance and lo < s.ts <= hi]


def median(values: Sequence[float | None]) -> float:
    clean = [v for v in values if v is not None]
    assert clean, "no values to take a median of"
    return float(np.median(clean))


RunFn = Callable[..., Run]


def make_runner(default_profile: ModelProfile) -> RunFn:
    """Run ``instances`` servers of one profile at ``rate`` req/s each for ``duration`` s."""

    def run(
        rate: float,
        duration: float = 120.0,
        *,
        profile: ModelProfile | None = None,
        instances: int = 1,
        faults: Sequence[Fault] = (),
        seed: int = 7,
        mix: RequestMix = SHORT_MIX,
        sample_interval: float = 5.0,
    ) -> Run:
        names = tuple(f"sim-{i}" for i in range(instances))
        scenario = Scenario(
            name="test",
            start=START,
            duration_s=duration,
            seed=seed,
            sample_interval_s=sample_interval,
            deployments=(
                Deployment(
                    profile=profile or default_profile,
                    instances=names,
                    arrival=Poisson(rate),
                    mix=mix,
                ),
            ),
            faults=tuple(faults),
        )
        sink = MemorySink()
        result = run_scenario(scenario, [sink], chunk_s=30.0)
        return Run(result, sink)

    return run
