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
from infersight.simulator.faults import EXPECTED_CAUSE, ROLE_FAULTS, Fault, FaultKind
from infersight.simulator.profiles import ModelProfile, SpeculativeDecoding
from infersight.simulator.workload import ArrivalProcess, LoraServing, RequestMix

#: Data-parallel engines one simulated instance may run.
MAX_ENGINES: Final = 16
#: Instances one pool of a disaggregated deployment may have.
MAX_POOL: Final = 64


@dataclass(frozen=True, slots=True)
class Disaggregation:
    """Disaggregated prefill/decode serving behind an llm-d-style routing proxy.

    Each user request reaches the proxy in front of one decode instance (its share of the
    deployment's traffic), which waits ``route_s``, sends the prompt to a prefill instance
    (one output token), then the request to its own decode instance; that one holds the
    request while its KV cache arrives (``kv_transfer_s``: the transfer of a
    ``kv_reference_tokens``-token prompt, proportional to the prompt's length) and then
    decodes every output token. ``connector`` is the proxy's ``llm_d.pd_proxy.connector``.
    """

    prefill: tuple[str, ...]
    decode: tuple[str, ...]
    kv_transfer_s: float = 0.03
    kv_reference_tokens: int = 0
    route_s: float = 0.003
    connector: str = "nixlv2"

    def __post_init__(self) -> None:
        for pool, names in (("prefill", self.prefill), ("decode", self.decode)):
            if not 1 <= len(names) <= MAX_POOL:
                raise InvalidInput(f"a disaggregated {pool} pool needs 1 to {MAX_POOL} instances")
        if set(self.prefill) & set(self.decode):
            raise InvalidInput("an instance cannot be in both the prefill and the decode pool")
        for name, value in (("kv_transfer", self.kv_transfer_s), ("route", self.route_s)):
            if not math.isfinite(value) or not 0.0 <= value <= 60.0:
                raise InvalidInput(f"disaggregated {name} time must be in [0, 60] s")
        if self.kv_reference_tokens < 0:
            raise InvalidInput("kv_reference_tokens must be ≥ 0 (0: a fixed transfer time)")
        if not self.connector:
            raise InvalidInput("a disaggregated deployment needs a KV connector name")

    def role(self, instance: str) -> str:
        """``prefill``, ``decode`` or ``""`` (not in this deployment)."""
        if instance in self.prefill:
            return "prefill"
        return "decode" if instance in self.decode else ""

    def pool(self, role: str) -> tuple[str, ...]:
        return self.prefill if role == "prefill" else self.decode

    def transfer_s(self, input_tokens: int) -> float:
        """The healthy KV transfer of a prompt of ``input_tokens``."""
        if not self.kv_reference_tokens:
            return self.kv_transfer_s
        return self.kv_transfer_s * input_tokens / self.kv_reference_tokens


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
    #: Disaggregated prefill/decode (``None``: every instance serves whole requests);
    #: ``instances`` are then its prefill pool, then its decode pool.
    disaggregated: Disaggregation | None = None
    #: LoRA adapters served beside the base model (``None``: the base model only).
    lora: LoraServing | None = None

    def __post_init__(self) -> None:
        lora = self.lora
        if lora is not None:
            if self.disaggregated is not None:
                raise InvalidInput("the simulator serves LoRA adapters on unified instances only")
            if self.engines != 1:
                # vLLM's LoRA metrics (vllm:lora_requests_info) refuse data parallelism.
                raise InvalidInput("a deployment with LoRA adapters runs one engine per instance")
            if self.profile.model_name in lora.names:
                raise InvalidInput(
                    f"a LoRA adapter cannot be named as its base model "
                    f"({self.profile.model_name!r})"
                )
        pd = self.disaggregated
        if pd is not None:
            if self.instances != pd.prefill + pd.decode:
                raise InvalidInput("a disaggregated deployment's instances are its two pools")
            if self.engines != 1:
                raise InvalidInput("a disaggregated deployment runs one engine per instance")
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
            role = ROLE_FAULTS.get(fault.kind)
            if role is not None and self.role(fault.instance) != role:
                raise InvalidInput(
                    f"{fault.kind} needs an instance of a disaggregated deployment's {role} "
                    f"pool, not {fault.instance!r}"
                )

    def role(self, instance: str) -> str:
        """The instance's role: ``prefill`` or ``decode`` in a disaggregated deployment,
        else ``""``."""
        for d in self.deployments:
            if d.disaggregated is not None and instance in d.instances:
                return d.disaggregated.role(instance)
        return ""

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
