"""ScalingPolicy documents (YAML or JSON, ``apiVersion: infersight/v1``, ``kind: ScalingPolicy``)
→ ``core.scaling.ScalingPolicy``, and back.

::

    apiVersion: infersight/v1
    kind: ScalingPolicy
    metadata: {name: chat}
    spec:
      model: llama-70b            # optional: absent = every model without a policy of its own
      replicas: {min: 1, max: 16}
      leadTime: 10m               # cold start (weights, CUDA context, graphs) = forecast horizon
      headroom: 0.4               # the capacity planner's 30–50 %
      historyWeeks: 4             # same time of day / day of week over this many weeks
      reactive:
        queueFactor: 2.5          # queue per instance above 2.5 × its service rate → scale out
        kvUsageHigh: 0.9
        gpuUtil: {up: 0.7, down: 0.3}
        burnRateHigh: 14.4        # the latency SLOs' short-window burn rate
      scaleIn: {cooldown: 15m, maxFraction: 0.25}
      staleAfter: 3m              # an input older than this is stale

Every key is optional except ``metadata.name``; the defaults are the essay's (those of
``ScalingPolicy``). Durations are ``30s`` / ``10m`` / ``1h`` or a number of seconds. A bad
document raises ``InvalidInput`` whose message names the field (``spec.replicas.min``).
"""

from __future__ import annotations

import math
from typing import Any, Final

import yaml
from pydantic import BaseModel, ConfigDict, Field

from infersight.core.errors import InvalidInput
from infersight.core.scaling import ScalingPolicy
from infersight.core.window import parse_duration
from infersight.service.documents import DocumentKind, Header, Reading, at, read_value, read_values

API_VERSION: Final = "infersight/v1"
KIND: Final = "ScalingPolicy"
_D = ScalingPolicy(name="defaults", model=None)

#: ScalingPolicy field → where it lives in the document (for error messages).
FIELD_PATHS: Final = {
    "name": "metadata.name",
    "model": "spec.model",
    "min_replicas": "spec.replicas.min",
    "max_replicas": "spec.replicas.max",
    "lead_time_s": "spec.leadTime",
    "headroom": "spec.headroom",
    "history_weeks": "spec.historyWeeks",
    "queue_factor": "spec.reactive.queueFactor",
    "kv_usage_high": "spec.reactive.kvUsageHigh",
    "gpu_util_up": "spec.reactive.gpuUtil.up",
    "gpu_util_down": "spec.reactive.gpuUtil.down",
    "burn_rate_high": "spec.reactive.burnRateHigh",
    "scale_in_cooldown_s": "spec.scaleIn.cooldown",
    "max_scale_in_fraction": "spec.scaleIn.maxFraction",
    "stale_after_s": "spec.staleAfter",
}

Duration = str | float | int


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class _Replicas(_Strict):
    min: int = _D.min_replicas
    max: int = _D.max_replicas


class _GpuUtil(_Strict):
    up: float = _D.gpu_util_up
    down: float = _D.gpu_util_down


class _Reactive(_Strict):
    queueFactor: float = _D.queue_factor
    kvUsageHigh: float = _D.kv_usage_high
    gpuUtil: _GpuUtil = Field(default_factory=_GpuUtil)
    burnRateHigh: float = _D.burn_rate_high


class _ScaleIn(_Strict):
    cooldown: Duration = _D.scale_in_cooldown_s
    maxFraction: float = _D.max_scale_in_fraction


class _Spec(_Strict):
    model: str | None = None
    replicas: _Replicas = Field(default_factory=_Replicas)
    leadTime: Duration = _D.lead_time_s
    headroom: float = _D.headroom
    historyWeeks: int = _D.history_weeks
    reactive: _Reactive = Field(default_factory=_Reactive)
    scaleIn: _ScaleIn = Field(default_factory=_ScaleIn)
    staleAfter: Duration = _D.stale_after_s


def _seconds(path: str, value: Duration) -> float:
    if isinstance(value, bool):
        raise InvalidInput(f"{path} must be a duration such as 10m or a number of seconds")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        with at(path):
            seconds = parse_duration(value).total_seconds()
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidInput(f"{path} must be a non-negative duration", details={path: value})
    return seconds


def parse_policy(data: Any) -> ScalingPolicy:
    """One ScalingPolicy document (a mapping) → ``ScalingPolicy``; errors name the field."""
    return read_value(data, SCALING_POLICY)


def _policy(header: Header, spec: _Spec) -> ScalingPolicy:
    return ScalingPolicy(
        name=header.name,
        model=spec.model,
        min_replicas=spec.replicas.min,
        max_replicas=spec.replicas.max,
        lead_time_s=_seconds("spec.leadTime", spec.leadTime),
        headroom=spec.headroom,
        history_weeks=spec.historyWeeks,
        queue_factor=spec.reactive.queueFactor,
        kv_usage_high=spec.reactive.kvUsageHigh,
        gpu_util_up=spec.reactive.gpuUtil.up,
        gpu_util_down=spec.reactive.gpuUtil.down,
        scale_in_cooldown_s=_seconds("spec.scaleIn.cooldown", spec.scaleIn.cooldown),
        max_scale_in_fraction=spec.scaleIn.maxFraction,
        burn_rate_high=spec.reactive.burnRateHigh,
        stale_after_s=_seconds("spec.staleAfter", spec.staleAfter),
    )


def parse_policies(text: str | bytes) -> list[ScalingPolicy]:
    """Every ScalingPolicy document of a (multi-document) YAML or JSON file."""
    return read_values(text, SCALING_POLICY)


#: The ScalingPolicy kind: every key is optional (``spec`` too), the essay's defaults.
SCALING_POLICY: Final[DocumentKind[ScalingPolicy]] = DocumentKind(
    KIND, {API_VERSION: Reading(_Spec, _policy, spec_required=False)}, field_paths=FIELD_PATHS
)


def to_document(policy: ScalingPolicy) -> dict[str, Any]:
    """The ScalingPolicy document of ``policy`` (``parse_policy`` reads it back to an equal one)."""
    spec: dict[str, Any] = {
        "replicas": {"min": policy.min_replicas, "max": policy.max_replicas},
        "leadTime": _duration_text(policy.lead_time_s),
        "headroom": policy.headroom,
        "historyWeeks": policy.history_weeks,
        "reactive": {
            "queueFactor": policy.queue_factor,
            "kvUsageHigh": policy.kv_usage_high,
            "gpuUtil": {"up": policy.gpu_util_up, "down": policy.gpu_util_down},
            "burnRateHigh": policy.burn_rate_high,
        },
        "scaleIn": {
            "cooldown": _duration_text(policy.scale_in_cooldown_s),
            "maxFraction": policy.max_scale_in_fraction,
        },
        "staleAfter": _duration_text(policy.stale_after_s),
    }
    if policy.model is not None:
        spec = {"model": policy.model, **spec}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": policy.name},
        "spec": spec,
    }


def to_yaml(policy: ScalingPolicy) -> str:
    return yaml.safe_dump(to_document(policy), sort_keys=False)


def _duration_text(seconds: float) -> str | float:
    """``600.0`` → ``10m``; a fractional or zero duration stays a number of seconds."""
    if seconds <= 0 or seconds != int(seconds):
        return seconds
    whole = int(seconds)
    for suffix, size in (("h", 3600), ("m", 60)):
        if whole % size == 0:
            return f"{whole // size}{suffix}"
    return f"{whole}s"
