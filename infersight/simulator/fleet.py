"""A fleet of simulated servers run together in virtual time, feeding sinks chunk by chunk.

Each instance has its own arrival stream (its share of its deployment's traffic: random
routing splits a Poisson process into independent Poisson processes) and its own fault
schedule, so instances advance independently; the fleet steps them all to the end of each
chunk and hands the chunk's output to every sink in one ``Batch``. Deterministic given the
scenario's seed.

An instance with several data-parallel engines is several ``InstanceSim`` engines sharing its
name, each with its share of the instance's traffic and the instance's faults. Their own
readings go out as ``EngineSample``s; the instance's ``ServerSample`` at each sample time
aggregates them the way the quantities mean it: counts (running, waiting, swapped) and
counters add up, ratios of each engine's own cache (KV usage, prefix-cache hit ratio) are
averaged over the engines (every engine has a KV pool of the same size).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from infersight.core.errors import InvalidInput
from infersight.core.samples import (
    SERVER_COUNTER_FIELDS,
    SERVER_GAUGE_FIELDS,
    SERVER_RATIO_FIELDS,
    GpuSample,
    ServerSample,
    with_interval_ratios,
)
from infersight.simulator.disaggregated import PdRouter
from infersight.simulator.engine import InstanceSim
from infersight.simulator.events import Batch, Completion, EngineSample
from infersight.simulator.faults import POOL_FAULTS, FaultSchedule
from infersight.simulator.scenario import Deployment, InjectedFault, Scenario
from infersight.simulator.sinks import Sink
from infersight.simulator.workload import ArrivalStream, scaled


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
    """One ``InstanceSim`` per engine (one per instance unless it is data-parallel); a
    disaggregated deployment runs only in virtual time (``build_fleet``)."""
    instances, routers = build_fleet(scenario)
    if routers:
        raise InvalidInput("disaggregated deployments are simulated in virtual time only")
    return instances


def _pd_faults(scenario: Scenario, d: Deployment, name: str) -> FaultSchedule:
    """``name``'s own faults, and its pool's (a pool fault names one instance of the pool)."""
    pd = d.disaggregated
    assert pd is not None
    pool = pd.pool(pd.role(name))
    return FaultSchedule(
        [
            f
            for f in scenario.faults
            if f.instance == name
            or (POOL_FAULTS.get(f.kind) == pd.role(name) and f.instance in pool)
        ]
    )


def _pd_router(scenario: Scenario, d: Deployment, index: int) -> PdRouter:
    """A disaggregated deployment: its pools' engines (seeded by their place in the fleet
    as any instance) and the proxies in front of its decode instances."""
    pd = d.disaggregated
    assert pd is not None
    sims: dict[str, InstanceSim] = {}
    arrivals = []
    decode_faults = []
    for offset, name in enumerate(d.instances):
        seeds = np.random.SeedSequence([scenario.seed, index + offset]).spawn(2)
        faults = _pd_faults(scenario, d, name)
        role = pd.role(name)
        if role == "decode":
            arrivals.append(
                ArrivalStream(
                    d.arrival,
                    d.mix,
                    np.random.default_rng(seeds[0]),
                    faults,
                    max_input_tokens=d.profile.max_model_len - 1,
                )
            )
            decode_faults.append(faults)
        sims[name] = InstanceSim(
            name,
            d.profile,
            epoch=scenario.start,
            rng=np.random.default_rng(seeds[1]),
            faults=faults,
            sample_interval_s=scenario.sample_interval_s,
            sampling=(d.mix.temperature, d.mix.top_p),
            gpu_telemetry=scenario.gpu_telemetry,
            speculative=d.speculative if role == "decode" else None,
            role=role,
        )
    return PdRouter(
        pd,
        [sims[n] for n in pd.prefill],
        [sims[n] for n in pd.decode],
        arrivals,
        decode_faults,
        np.random.default_rng(np.random.SeedSequence([scenario.seed, index, 1 << 20])),
        scenario.start,
    )


def build_fleet(scenario: Scenario) -> tuple[list[InstanceSim], list[PdRouter]]:
    """The standalone engines, and one router per disaggregated deployment."""
    instances = []
    routers = []
    index = 0
    for deployment in scenario.deployments:
        if deployment.disaggregated is not None:
            routers.append(_pd_router(scenario, deployment, index))
            index += len(deployment.instances)
            continue
        n = deployment.engines
        process = deployment.arrival if n == 1 else scaled(deployment.arrival, 1.0 / n)
        for name in deployment.instances:
            for engine in range(n):
                # Engine 0 keeps the seeds a single-engine instance always had.
                key = [scenario.seed, index] if engine == 0 else [scenario.seed, index, engine]
                seeds = np.random.SeedSequence(key).spawn(2)
                faults = FaultSchedule([f for f in scenario.faults if f.instance == name])
                arrivals = ArrivalStream(
                    process,
                    deployment.mix,
                    np.random.default_rng(seeds[0]),
                    faults,
                    max_input_tokens=deployment.profile.max_model_len,
                    adapters=deployment.lora.adapters if deployment.lora is not None else (),
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
                        engine_index=engine,
                        gpu_telemetry=scenario.gpu_telemetry,
                        speculative=deployment.speculative,
                        lora=deployment.lora,
                    )
                )
            index += 1
    return instances, routers


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _sum(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def aggregate(samples: Sequence[ServerSample]) -> ServerSample:
    """One instance's reading from its engines' readings at the same time: gauges and counters
    summed, ratios averaged (``core.samples``' field groups, the scraper's rule)."""
    if len(samples) == 1:
        return samples[0]
    summed: dict[str, Any] = {
        name: _sum([getattr(s, name) for s in samples])
        for name in (*SERVER_GAUGE_FIELDS, *SERVER_COUNTER_FIELDS)
    }
    means: dict[str, Any] = {
        name: _mean([getattr(s, name) for s in samples]) for name in SERVER_RATIO_FIELDS
    }
    return dataclasses.replace(samples[0], **summed, **means)


def _instance_samples(
    per_engine: Sequence[EngineSample], previous: dict[str, ServerSample]
) -> list[ServerSample]:
    """Each instance's readings, with the ratios of its counters taken over the interval
    since its previous reading (``previous``, updated), as the sidecar's scraper does."""
    grouped: dict[tuple[str, object], list[ServerSample]] = {}
    for e in per_engine:
        grouped.setdefault((e.sample.instance, e.sample.ts), []).append(e.sample)
    out = []
    for group in grouped.values():
        sample = aggregate(group)
        out.append(with_interval_ratios(sample, previous.get(sample.instance)))
        previous[sample.instance] = sample
    return out


def run_scenario(
    scenario: Scenario,
    sinks: Sequence[Sink],
    *,
    chunk_s: float = 60.0,
    progress: Callable[[Progress], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> RunResult:
    """Run ``scenario`` to its end in virtual time; sinks are written but not closed."""
    instances, routers = build_fleet(scenario)
    started = clock()
    t = 0.0
    requests = errors = server = gpu = 0
    previous: dict[str, ServerSample] = {}
    while t < scenario.duration_s:
        t = min(t + chunk_s, scenario.duration_s)
        completions: list[Completion] = []
        engines: list[EngineSample] = []
        gpus: list[GpuSample] = []
        for sim in instances:
            sim.advance_to(t)
            part = sim.drain()
            completions.extend(part.completions)
            engines.extend(part.engine_samples)
            gpus.extend(part.gpu_samples)
        for router in routers:
            part = router.advance_to(t)
            completions.extend(part.completions)
            engines.extend(EngineSample(0, s) for s in part.server_samples)
            gpus.extend(part.gpu_samples)
        completions.sort(key=lambda c: c.record.start)
        servers = _instance_samples(engines, previous)
        batch = Batch(tuple(completions), tuple(servers), tuple(gpus), tuple(engines))
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
        preemptions=sum(sim.preemptions_total for sim in instances)
        + sum(router.preemptions_total for router in routers),
        ground_truth=scenario.ground_truth(),
    )
