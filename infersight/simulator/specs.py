"""The edge: YAML profile and scenario files (``apiVersion: infersight/v1``) parsed with pydantic.

The file format and the model evolve separately: these pydantic models mirror the files, and
``to_*`` functions convert them into the frozen types of ``profiles`` and ``scenario``.
Shipped files live in ``simulator/profiles/`` and ``simulator/scenarios/``.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infersight.core.errors import InvalidInput, NotFound
from infersight.simulator.faults import DEFAULT_MAGNITUDE, Fault, FaultKind
from infersight.simulator.profiles import (
    GpuProfile,
    ModelProfile,
    SpeculativeDecoding,
    StepCosts,
    TokenizerCosts,
)
from infersight.simulator.scenario import MAX_POOL, Deployment, Disaggregation, Scenario
from infersight.simulator.workload import (
    LORA_STEP_OVERHEAD,
    MAX_LORA,
    ArrivalProcess,
    Bursts,
    Diurnal,
    LengthDist,
    LengthKind,
    LoraServing,
    Parallel,
    Poisson,
    RequestMix,
    Weighted,
)

# What other modules use (and the types its answers carry); the tuning constants and
# helpers left out are this module's own.
__all__ = [
    "SCENARIOS_DIR",
    "ArrivalSpec",
    "DeploymentSpec",
    "DisaggregatedSpec",
    "FaultSpec",
    "GpuFile",
    "LengthSpec",
    "LoraSpec",
    "Metadata",
    "MixSpec",
    "ModelFile",
    "ParallelSpec",
    "ScenarioBody",
    "ScenarioFile",
    "SpeculativeSpec",
    "StepSpec",
    "TokenizerSpec",
    "load_profile",
    "load_scenario",
    "parse_duration",
    "scenario_from_data",
    "shipped_scenarios",
]

API_VERSION: Final = "infersight/v1"
PROFILES_DIR: Final = Path(__file__).parent / "profiles"
SCENARIOS_DIR: Final = Path(__file__).parent / "scenarios"
_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+$|^\d+(?:\.\d+)?$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)?")
_UNIT_S: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: float | int | str) -> float:
    """``90`` / ``"90s"`` / ``"15m"`` / ``"1h30m"`` / ``"1d"`` → seconds."""
    if isinstance(value, int | float):
        return float(value)
    text = value.replace(" ", "")
    if not _DURATION.fullmatch(text):
        raise InvalidInput(f"not a duration: {value!r} (use e.g. 30s, 15m, 1h30m, 1d)")
    return sum(float(n) * _UNIT_S[unit or None] for n, unit in _PART.findall(text))


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuFile(_Spec):
    apiVersion: Literal["infersight/v1"]
    kind: Literal["GpuProfile"]
    name: str
    product_name: str
    memory_total_mib: float
    memory_bandwidth_gbps: float
    sm_clock_max_mhz: float
    sm_clock_idle_mhz: float
    memory_clock_mhz: float
    power_idle_w: float
    power_limit_w: float
    power_max_dynamic_w: float
    temperature_ambient_c: float
    temperature_per_w: float

    def convert(self) -> GpuProfile:
        data = self.model_dump(exclude={"apiVersion", "kind"})
        return GpuProfile(**data)


class StepSpec(_Spec):
    cpu_overhead_s: float
    decode_base_s: float
    decode_per_seq_s: float
    decode_per_kv_token_s: float
    prefill_per_token_s: float


class TokenizerSpec(_Spec):
    base_s: float
    per_token_s: float


class ModelFile(_Spec):
    apiVersion: Literal["infersight/v1"]
    kind: Literal["ModelProfile"]
    name: str
    model_name: str
    gpu: str
    tensor_parallel: int
    weights_gib: float
    activation_reserve_gib: float
    kv_bytes_per_token: int
    gpu_memory_utilization: float
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    step: StepSpec
    tokenizer: TokenizerSpec

    def convert(self, gpu: GpuProfile) -> ModelProfile:
        data = self.model_dump(exclude={"apiVersion", "kind", "gpu", "step", "tokenizer"})
        return ModelProfile(
            **data,
            gpu=gpu,
            step=StepCosts(**self.step.model_dump()),
            tokenizer=TokenizerCosts(**self.tokenizer.model_dump()),
        )


class ArrivalSpec(_Spec):
    process: Literal["poisson", "diurnal", "bursts"] = "poisson"
    rate: float | None = Field(default=None, ge=0)
    mean_rate: float | None = Field(default=None, ge=0)
    amplitude: float = 0.6
    peak: float | str = "14h"
    period: float | str = "1d"
    base_rate: float | None = Field(default=None, ge=0)
    burst_rate: float | None = Field(default=None, ge=0)
    every: float | str = "10m"
    burst_duration: float | str = "1m"
    offset: float | str = 0.0

    def convert(self, share: float, start_of_day_s: float = 0.0) -> ArrivalProcess:
        """The process of one instance that receives ``share`` of the deployment's traffic.

        ``peak`` is a time of day (UTC); ``start_of_day_s`` is where the scenario starts in
        its day, so that the cycle is anchored to the clock rather than to the start.
        """
        if self.process == "poisson":
            return Poisson(_need(self.rate, "rate") * share)
        if self.process == "diurnal":
            return Diurnal(
                mean_rate=_need(self.mean_rate, "mean_rate") * share,
                amplitude=self.amplitude,
                peak_s=parse_duration(self.peak) - start_of_day_s,
                period_s=parse_duration(self.period),
            )
        return Bursts(
            base_rate=_need(self.base_rate, "base_rate") * share,
            burst_rate=_need(self.burst_rate, "burst_rate") * share,
            every_s=parse_duration(self.every),
            duration_s=parse_duration(self.burst_duration),
            offset_s=parse_duration(self.offset),
        )


def _need(value: float | None, name: str) -> float:
    if value is None:
        raise InvalidInput(f"arrival.{name} is required for this process")
    return value


class LengthSpec(_Spec):
    kind: Literal["fixed", "uniform", "lognormal"] = "lognormal"
    median: int
    sigma: float = 0.0
    min: int = 1
    max: int = 4096

    def convert(self) -> LengthDist:
        return LengthDist(LengthKind(self.kind), self.median, self.sigma, self.min, self.max)


class ParallelSpec(_Spec):
    """``mix.parallel``: ``share`` of the requests ask for ``n`` sequences (OpenAI ``n``),
    ``n`` one of the listed values (uniformly)."""

    share: float = Field(gt=0.0, le=1.0)
    n: int | list[int] = 2

    def convert(self) -> Parallel:
        choices = (self.n,) if isinstance(self.n, int) else tuple(self.n)
        return Parallel(self.share, choices)


class MixSpec(_Spec):
    input: LengthSpec
    output: LengthSpec
    max_tokens: int = 1024
    tenants: dict[str, float] = Field(default_factory=lambda: {"default": 1.0})
    priorities: dict[str, float] = Field(default_factory=lambda: {"standard": 1.0})
    temperature: float = 0.7
    top_p: float = 0.95
    gateway: float | str = 0.0
    parallel: ParallelSpec | None = None

    def convert(self) -> RequestMix:
        return RequestMix(
            input=self.input.convert(),
            output=self.output.convert(),
            max_tokens=self.max_tokens,
            tenants=tuple(Weighted(k, v) for k, v in self.tenants.items()),
            priorities=tuple(Weighted(k, v) for k, v in self.priorities.items()),
            temperature=self.temperature,
            top_p=self.top_p,
            gateway_s=parse_duration(self.gateway),
            parallel=self.parallel.convert() if self.parallel is not None else None,
        )


class SpeculativeSpec(_Spec):
    num_speculative_tokens: int = Field(ge=1, le=64)
    acceptance_rate: float = Field(ge=0.0, le=1.0)

    def convert(self) -> SpeculativeDecoding:
        return SpeculativeDecoding(self.num_speculative_tokens, self.acceptance_rate)


class LoraSpec(_Spec):
    """``lora:`` of a deployment: its adapters with their shares of the traffic (the rest is
    the base model's) and ``max_lora`` (vLLM ``--max-loras``)."""

    adapters: dict[str, float] = Field(min_length=1)
    max_lora: int = Field(default=4, ge=1, le=MAX_LORA)
    step_overhead: float = Field(default=LORA_STEP_OVERHEAD, ge=0.0, le=1.0)

    def convert(self) -> LoraServing:
        return LoraServing(
            tuple(Weighted(name, share) for name, share in self.adapters.items()),
            self.max_lora,
            self.step_overhead,
        )


class DisaggregatedSpec(_Spec):
    """``disaggregated:`` of a deployment: its two pools (instances named
    ``{name_prefix}-prefill-{i}`` and ``{name_prefix}-decode-{i}``) and the proxy's timings."""

    prefill_instances: int = Field(ge=1, le=MAX_POOL)
    decode_instances: int = Field(ge=1, le=MAX_POOL)
    #: The KV cache's transfer from the prefill to the decode instance (per request).
    kv_transfer: float | str = "30ms"
    #: When set, ``kv_transfer`` is the transfer of a prompt of this many tokens, and a
    #: transfer takes time in proportion to its prompt.
    kv_reference_tokens: int = Field(default=0, ge=0)
    #: The proxy's own time before it sends the prefill leg (routing).
    route: float | str = "3ms"
    connector: str = Field(default="nixlv2", min_length=1, max_length=64)

    def convert(self, prefix: str) -> Disaggregation:
        return Disaggregation(
            prefill=tuple(f"{prefix}-prefill-{i}" for i in range(self.prefill_instances)),
            decode=tuple(f"{prefix}-decode-{i}" for i in range(self.decode_instances)),
            kv_transfer_s=parse_duration(self.kv_transfer),
            kv_reference_tokens=self.kv_reference_tokens,
            route_s=parse_duration(self.route),
            connector=self.connector,
        )


class DeploymentSpec(_Spec):
    profile: str
    #: The model name the servers report (vLLM ``--served-model-name``; default: the
    #: profile's): a deployment with its own SLOs serves the same weights under its own name.
    served_model_name: str | None = Field(default=None, min_length=1, max_length=256)
    instances: int | list[str] = 1
    name_prefix: str | None = None
    engines: int = Field(default=1, ge=1, le=16)
    arrival: ArrivalSpec
    mix: MixSpec
    speculative: SpeculativeSpec | None = None
    disaggregated: DisaggregatedSpec | None = None
    lora: LoraSpec | None = None


class FaultSpec(_Spec):
    kind: FaultKind
    instance: str
    start: float | str
    end: float | str
    magnitude: float | None = None
    #: ``kv_transfer_slow``: the share of the slowed transfers that fail.
    failing: float = Field(default=0.0, ge=0.0, lt=1.0)


class ScenarioBody(_Spec):
    start: datetime = datetime(2026, 1, 5, tzinfo=UTC)
    duration: float | str
    seed: int = 0
    sample_interval: float | str = "10s"
    gpu_telemetry: bool = True
    fleet: list[DeploymentSpec]
    faults: list[FaultSpec] = Field(default_factory=list)


class Metadata(_Spec):
    name: str
    description: str = ""


class ScenarioFile(_Spec):
    apiVersion: Literal["infersight/v1"]
    kind: Literal["Scenario"]
    metadata: Metadata
    spec: ScenarioBody


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NotFound(f"no such file: {path}") from None
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{path}: not valid YAML: {exc}") from None


def _validate(kind: type[_Spec], data: Any, path: Path) -> Any:
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"]} for e in exc.errors()
        ]
        raise InvalidInput(f"{path}: invalid {kind.__name__}", details={"errors": errors}) from None


def _resolve(name_or_path: str | Path, directory: Path) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    return directory / f"{name_or_path}.yaml"


def load_gpu(name_or_path: str | Path) -> GpuProfile:
    path = _resolve(name_or_path, PROFILES_DIR)
    spec: GpuFile = _validate(GpuFile, _read_yaml(path), path)
    return spec.convert()


def load_profile(name_or_path: str | Path) -> ModelProfile:
    """A model profile by shipped name (``llama-3.1-8b-h200x1``) or by file path."""
    path = _resolve(name_or_path, PROFILES_DIR)
    spec: ModelFile = _validate(ModelFile, _read_yaml(path), path)
    gpu = load_gpu(path.parent / f"{spec.gpu}.yaml")
    return spec.convert(gpu)


def _disaggregation(d: DeploymentSpec, profile: ModelProfile) -> Disaggregation | None:
    if d.disaggregated is None:
        return None
    if "instances" in d.model_fields_set:
        raise InvalidInput(
            "a disaggregated deployment sizes its pools with disaggregated.prefill_instances "
            "and disaggregated.decode_instances, not instances",
            details={"profile": d.profile},
        )
    if d.engines != 1:
        raise InvalidInput("a disaggregated deployment runs one engine per instance (engines: 1)")
    return d.disaggregated.convert(d.name_prefix or profile.name)


def _instance_names(d: DeploymentSpec, profile: ModelProfile) -> tuple[str, ...]:
    if isinstance(d.instances, list):
        return tuple(d.instances)
    prefix = d.name_prefix or profile.name
    return tuple(f"{prefix}-{i}" for i in range(d.instances))


def scenario_from_data(data: Any, source: Path | str = "<scenario>") -> Scenario:
    spec: ScenarioFile = _validate(ScenarioFile, data, Path(str(source)))
    body = spec.spec
    start = body.start if body.start.tzinfo else body.start.replace(tzinfo=UTC)
    midnight = start.replace(hour=0, minute=0, second=0, microsecond=0)
    start_of_day = (start - midnight).total_seconds()
    deployments = []
    for d in body.fleet:
        profile = load_profile(d.profile)
        if d.served_model_name is not None:
            profile = dataclasses.replace(profile, model_name=d.served_model_name)
        pd = _disaggregation(d, profile)
        names = pd.prefill + pd.decode if pd is not None else _instance_names(d, profile)
        # A split deployment's traffic reaches the proxies in front of its decode instances.
        entries = len(pd.decode) if pd is not None else len(names)
        deployments.append(
            Deployment(
                profile=profile,
                instances=names,
                arrival=d.arrival.convert(1.0 / entries, start_of_day),
                mix=d.mix.convert(),
                engines=d.engines,
                speculative=d.speculative.convert() if d.speculative is not None else None,
                disaggregated=pd,
                lora=d.lora.convert() if d.lora is not None else None,
            )
        )
    faults = tuple(
        Fault(
            kind=f.kind,
            instance=f.instance,
            start_s=parse_duration(f.start),
            end_s=parse_duration(f.end),
            magnitude=f.magnitude if f.magnitude is not None else DEFAULT_MAGNITUDE[f.kind],
            failing=f.failing,
        )
        for f in body.faults
    )
    return Scenario(
        name=spec.metadata.name,
        description=spec.metadata.description,
        start=start,
        duration_s=parse_duration(body.duration),
        seed=body.seed,
        sample_interval_s=parse_duration(body.sample_interval),
        deployments=tuple(deployments),
        faults=faults,
        gpu_telemetry=body.gpu_telemetry,
    )


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A scenario by shipped name (``quiet-day``) or by file path."""
    path = _resolve(name_or_path, SCENARIOS_DIR)
    return scenario_from_data(_read_yaml(path), path)


def shipped_scenarios() -> list[str]:
    return sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml"))
