"""Scenarios: the fleet, its traffic and its injected faults, with the ground truth of a run.

These are the validated, immutable types; ``specs`` parses the YAML that users write
(``apiVersion: infersight/v1``, ``kind: Scenario``) into them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from infersight.core.errors import InvalidInput
from infersight.core.records import check_label, check_timestamp
from infersight.simulator.faults import EXPECTED_CAUSE, Fault, FaultKind
from infersight.simulator.profiles import ModelProfile, SpeculativeDecoding
from infersight.simulator.workload import ArrivalProcess, RequestMix

#: Data-parallel engines one simulated instance may run.
MAX_ENGINES: Final = 16


@dataclass(frozen=True, slots=True)
class Deployment:
    """One model served by several identical instances, each with its share of the traffic.

    ``arrival`` is one instance's share. An instance may run ``engines`` data-parallel
    engines (vLLM ``--data-parallel-size``): each engine has its own GPUs (the profile's
    tensor-parallel group), scheduler, queues and KV cache, and receives an equal share of
    the instance's traffic (random routing: independent Poisson streams).
    """

    profile: ModelProfile
    instances: tuple[str, ...]
    arrival: ArrivalProcess
    mix: RequestMix
    engines: int = 1
    #: Speculative decoding on every engine of the deployment (``None``: off).
    speculative: SpeculativeDecoding | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.engines <= MAX_ENGINES:
            raise InvalidInput(f"engines per instance must be in [1, {MAX_ENGINES}]")
        if not self.instances:
            raise InvalidInput("a deployment needs at least one instance")
        for name in self.instances:
            if not name:
                raise InvalidInput("instance names must not be empty")
            check_label("instance", name)


@dataclass(frozen=True, slots=True)
class InjectedFault:
    """Ground truth: what was injected, where, when, and which diagnosis it should produce."""

    kind: FaultKind
    instance: str
    start: datetime
    end: datetime
    magnitude: float
    expected_cause: str


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    start: datetime
    duration_s: float
    seed: int
    sample_interval_s: float
    deployments: tuple[Deployment, ...]
    faults: tuple[Fault, ...] = ()
    description: str = ""
    #: ``False``: no GPU samples at all (a host without NVML or dcgm-exporter, as a sidecar
    #: run with ``--gpu-source none`` sees it).
    gpu_telemetry: bool = True

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidInput("a scenario needs a name")
        check_timestamp("start", self.start)
        if not math.isfinite(self.duration_s) or not 0 < self.duration_s <= 31 * 86400:
            raise InvalidInput("duration must be in (0, 31 days]")
        if not 0.05 <= self.sample_interval_s <= 3600:
            raise InvalidInput("sample interval must be in [0.05 s, 1 h]")
        if not self.deployments:
            raise InvalidInput("a scenario needs at least one deployment")
        names = [n for d in self.deployments for n in d.instances]
        if len(set(names)) != len(names):
            raise InvalidInput("instance names must be unique across the fleet")
        for fault in self.faults:
            if fault.instance not in names:
                raise InvalidInput(
                    f"fault targets unknown instance {fault.instance!r}",
                    details={"instances": names},
                )
            if fault.start_s >= self.duration_s:
                raise InvalidInput("a fault starts after the scenario ends")

    @property
    def instances(self) -> tuple[str, ...]:
        return tuple(n for d in self.deployments for n in d.instances)

    def ground_truth(self) -> tuple[InjectedFault, ...]:
        return tuple(
            InjectedFault(
                kind=f.kind,
                instance=f.instance,
                start=self.start + timedelta(seconds=f.start_s),
                end=self.start + timedelta(seconds=min(f.end_s, self.duration_s)),
                magnitude=f.magnitude,
                expected_cause=EXPECTED_CAUSE[f.kind],
            )
            for f in self.faults
        )
