"""A fleet of simulated servers run together in virtual time, feeding sinks chunk by chunk.

Each instance has its own arrival stream (its share of its deployment's traffic: random
routing splits a Poisson process into independent Poisson processes) and its own fault
schedule, so instances advance independently; the fleet steps them all to the end of each
chunk and hands the chunk's output to every sink in one ``Batch``. Deterministic given the
scenario's seed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from core.samples import GpuSample, ServerSample
from simulator.engine import InstanceSim
from simulator.events import Batch, Completion
from simulator.faults import FaultSchedule
from simulator.scenario import InjectedFault, Scenario
from simulator.sinks import Sink
from simulator.workload import ArrivalStream


@dataclass(frozen=True, slots=True)
class Progress:
    virtual_s: float
    duration_s: float
    requests: int
    wall_s: float


@dataclass(frozen=True, slots=True)
class RunResult:
    scenario: str
    virtual_s: float
    wall_s: float
    requests: int
    errors: int
    server_samples: int
    gpu_samples: int
    preemptions: int
    ground_truth: tuple[InjectedFault, ...]

    @property
    def requests_per_wall_s(self) -> float:
        return self.requests / self.wall_s if self.wall_s > 0 else float("inf")


def build_instances(scenario: Scenario) -> list[InstanceSim]:
    instances = []
    index = 0
    for deployment in scenario.deployments:
        for name in deployment.instances:
            seeds = np.random.SeedSequence([scenario.seed, index]).spawn(2)
            faults = FaultSchedule([f for f in scenario.faults if f.instance == name])
            arrivals = ArrivalStream(
                deployment.arrival,
                deployment.mix,
                np.random.default_rng(seeds[0]),
                faults,
                max_input_tokens=deployment.profile.max_model_len,
            )
            instances.append(
                InstanceSim(
                    name,
                    deployment.profile,
                    epoch=scenario.start,
                    rng=np.random.default_rng(seeds[1]),
                    arrivals=arrivals,
                    faults=faults,
                    sample_interval_s=scenario.sample_interval_s,
                    sampling=(deployment.mix.temperature, deployment.mix.top_p),
                )
            )
            index += 1
    return instances


def run_scenario(
    scenario: Scenario,
    sinks: Sequence[Sink],
    *,
    chunk_s: float = 60.0,
    progress: Callable[[Progress], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> RunResult:
    """Run ``scenario`` to its end in virtual time; sinks are written but not closed."""
    instances = build_instances(scenario)
    started = clock()
    t = 0.0
    requests = errors = server = gpu = 0
    while t < scenario.duration_s:
        t = min(t + chunk_s, scenario.duration_s)
        completions: list[Completion] = []
        servers: list[ServerSample] = []
        gpus: list[GpuSample] = []
        for sim in instances:
            sim.advance_to(t)
            part = sim.drain()
            completions.extend(part.completions)
            servers.extend(part.server_samples)
            gpus.extend(part.gpu_samples)
        completions.sort(key=lambda c: c.record.start)
        batch = Batch(tuple(completions), tuple(servers), tuple(gpus))
        for sink in sinks:
            sink.write(batch)
        requests += len(completions)
        errors += sum(c.record.is_error for c in completions)
        server += len(servers)
        gpu += len(gpus)
        if progress is not None:
            progress(Progress(t, scenario.duration_s, requests, clock() - started))
    return RunResult(
        scenario=scenario.name,
        virtual_s=scenario.duration_s,
        wall_s=clock() - started,
        requests=requests,
        errors=errors,
        server_samples=server,
        gpu_samples=gpu,
        preemptions=sum(sim.preemptions_total for sim in instances),
        ground_truth=scenario.ground_truth(),
    )
