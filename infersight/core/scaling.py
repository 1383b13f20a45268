"""The replica recommender: how many instances a model's pool should have now, and why.

Pure decision over one ``ScalingInputs`` snapshot (no I/O); the service gathers the inputs from
the store, the backtest from a simulated fleet. The rules follow the essay's elastic-scaling
method (predictive + reactive, scale out fast, scale in slowly):

* **Predictive**: ``ceil(forecast × (1 + headroom) / capacity)`` — the peak demand expected
  within the lead time (the model's cold start, because an instance asked for now is ready only
  then), sized like the capacity planner (``core.capacity.instances_needed``: the 30–50 %
  headroom absorbs bursts and the loss of an instance) with the per-instance capacity that still
  meets the TTFT / TPOT targets.
* **Reactive** (on what is happening, each only ever raises the count, ``n`` = observed):
  queue per instance above ``queue_factor × service rate`` → ``ceil(n × queue / (queue_factor ×
  service rate))``; KV-cache usage at or above ``kv_usage_high`` → ``ceil(n × usage /
  kv_usage_high)``; GPU utilisation above ``gpu_util_up`` **while requests wait** (at least
  ``GPU_UTIL_QUEUE`` per instance) → ``ceil(n × util / gpu_util_up)`` (HPA's formula); the
  latency SLOs' short-window burn rate above ``burn_rate_high`` → ``n + 1``. Each is at least
  ``n + 1`` when it fires.

  Utilisation alone is not evidence of saturation: a batching engine keeps its GPU busy with a
  single request (NVML's "utilisation" is the share of time any kernel ran), so the essay's
  70 % rule on its own holds a fleet at ``max_replicas`` all day — the closed-loop backtest
  (``simulator.autoscale``) measured 112 % of static peak sizing's GPU-hours that way. Here it
  counts only when the queue corroborates it; the uncorroborated rule is the backtest's
  ``reactive-gpu`` baseline, which also uses ``gpu_util_down`` (30 % for 30 minutes down).
* **Target** = the larger of predictive and reactive, then clamped to ``[min, max]``.
* **Scale-in safety** (target < observed): every input it rests on (capacity, demand,
  forecast) must be fresh, else hold — a missing series never reads as "no load" (KEDA's
  ``ignoreNullValues`` trap); the **forecast check**: when the forecast peak needs more
  instances than the demand now does, demand rebounds within the lead time — hold; the
  **cooldown**: load must have been below the scale-in threshold (the target below the observed
  count, ``below_scale_in_threshold``) for ``scale_in_cooldown_s``; the **step**: remove at most
  ``max_scale_in_fraction`` of the observed instances (at least one).

Every ``Recommendation`` names its driver and one sentence of reason with the input's value, and
lists the inputs that were stale or missing (an input older than ``stale_after_s`` per
``input_times`` is stale and is not used).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from infersight.core.errors import InvalidInput, NotFound

#: The value inputs of ``ScalingInputs`` that carry a timestamp in ``input_times``.
INPUTS: Final = (
    "capacity_rps",
    "demand_rps",
    "forecast_rps",
    "queue_per_instance",
    "service_rate_rps",
    "kv_usage",
    "burn_rate_short",
    "gpu_util",
)
DRIVERS: Final = (
    "forecast",
    "queue",
    "kv_cache",
    "burn_rate",
    "gpu_util",
    "min",
    "max",
    "cooldown",
    "scale_in_step",
    "rebound",
    "hold",
)
FORECAST_BASES: Final = ("weeks", "recent")
#: The pools of a disaggregated (prefill/decode) model, each recommended for apart; "" is the
#: one pool of a model whose instances each serve whole requests.
POOLS: Final = ("prefill", "decode")
MAX_REPLICAS_LIMIT: Final = 100_000
#: Requests waiting per instance from which a busy GPU counts as saturated (see the docstring).
GPU_UTIL_QUEUE: Final = 1.0
_EPS: Final = 1e-9


def _fraction(name: str, value: float, low: float, high: float) -> None:
    if not (math.isfinite(value) and low <= value <= high):
        raise InvalidInput(f"{name} must be in [{low}, {high}]", details={name: value})


def _positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise InvalidInput(f"{name} must be a positive number", details={name: value})


@dataclass(frozen=True)
class ScalingPolicy:
    """A ScalingPolicy spec (``apiVersion: infersight/v1``); defaults from the essay."""

    name: str
    model: str | None  # None = every model without a policy of its own
    min_replicas: int = 1
    max_replicas: int = 16
    lead_time_s: float = 600.0  # cold start (weights, CUDA context, graphs); forecast horizon
    headroom: float = 0.4  # 30–50 % of the capacity planner
    history_weeks: int = 4
    queue_factor: float = 2.5  # queue per instance above queue_factor × service rate → out
    kv_usage_high: float = 0.9
    gpu_util_up: float = 0.70
    gpu_util_down: float = 0.30
    scale_in_cooldown_s: float = 900.0
    max_scale_in_fraction: float = 0.25
    burn_rate_high: float = 14.4  # short-window burn above this → scale out
    stale_after_s: float = 180.0  # an input older than this is stale

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 200:
            raise InvalidInput("name must be 1–200 characters", details={"name": self.name})
        if self.model is not None and not self.model:
            raise InvalidInput("model must be a non-empty name or absent (every model)")
        for key, value in (
            ("min_replicas", self.min_replicas),
            ("max_replicas", self.max_replicas),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidInput(f"{key} must be an integer", details={key: value})
            if not 0 <= value <= MAX_REPLICAS_LIMIT:
                raise InvalidInput(
                    f"{key} must be in [0, {MAX_REPLICAS_LIMIT}]", details={key: value}
                )
        if self.max_replicas < max(1, self.min_replicas):
            raise InvalidInput(
                "max_replicas must be ≥ min_replicas and ≥ 1",
                details={"min_replicas": self.min_replicas, "max_replicas": self.max_replicas},
            )
        if isinstance(self.history_weeks, bool) or not 1 <= self.history_weeks <= 52:
            raise InvalidInput(
                "history_weeks must be in [1, 52]", details={"history_weeks": self.history_weeks}
            )
        _fraction("lead_time_s", self.lead_time_s, 0.0, 86_400.0)
        _fraction("headroom", self.headroom, 0.0, 4.0)
        _positive("queue_factor", self.queue_factor)
        _fraction("kv_usage_high", self.kv_usage_high, _EPS, 1.0)
        _fraction("gpu_util_up", self.gpu_util_up, _EPS, 1.0)
        _fraction("gpu_util_down", self.gpu_util_down, 0.0, 1.0)
        if self.gpu_util_down >= self.gpu_util_up:
            raise InvalidInput(
                "gpu_util_down must be below gpu_util_up",
                details={"gpu_util_down": self.gpu_util_down, "gpu_util_up": self.gpu_util_up},
            )
        _fraction("scale_in_cooldown_s", self.scale_in_cooldown_s, 0.0, 7 * 86_400.0)
        _fraction("max_scale_in_fraction", self.max_scale_in_fraction, 0.0, 1.0)
        _positive("burn_rate_high", self.burn_rate_high)
        _positive("stale_after_s", self.stale_after_s)


@dataclass(frozen=True)
class ScalingInputs:
    """One model's pool at one moment (the whole model where ``pool`` is ""); ``None`` = not
    measured."""

    model: str
    observed_instances: int
    capacity_rps: float | None  # per-instance req/s that still meets the TTFT/TPOT targets
    demand_rps: float | None  # now
    forecast_rps: float | None  # peak expected within [now, now + lead_time]
    queue_per_instance: float | None
    service_rate_rps: float | None  # per instance, measured
    kv_usage: float | None
    burn_rate_short: float | None
    gpu_util: float | None
    low_load_since: float | None  # unix s since which load has been below the threshold
    input_times: Mapping[str, float] = field(default_factory=dict)  # name → newest sample
    #: Where ``forecast_rps`` comes from: ``weeks`` (the same time of week over earlier weeks)
    #: or ``recent`` (no earlier week holds the model: the busiest minute of the last lead time,
    #: a persistence forecast that cannot see a rebound coming).
    forecast_basis: str = "weeks"
    #: The pool these inputs describe: "" (every instance of the model) or one of ``POOLS``.
    pool: str = ""

    def __post_init__(self) -> None:
        if self.pool not in ("", *POOLS):
            raise InvalidInput(
                f"pool must be empty or one of {', '.join(POOLS)}", details={"pool": self.pool}
            )
        n = self.observed_instances
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_REPLICAS_LIMIT:
            raise InvalidInput(
                f"observed_instances must be an integer in [0, {MAX_REPLICAS_LIMIT}]",
                details={"observed_instances": n},
            )
        for name in INPUTS:
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise InvalidInput(f"{name} must be a finite number ≥ 0", details={name: value})
        if self.forecast_basis not in FORECAST_BASES:
            raise InvalidInput(
                f"forecast_basis must be one of {', '.join(FORECAST_BASES)}",
                details={"forecast_basis": self.forecast_basis},
            )
        unknown = sorted(set(self.input_times) - set(INPUTS))
        if unknown:
            raise InvalidInput("input_times names unknown inputs", details={"unknown": unknown})


@dataclass(frozen=True)
class Recommendation:
    model: str
    at: float  # unix s
    observed: int
    desired: int
    predictive: int | None
    reactive: int | None
    forecast_rps: float | None
    driver: str  # one of DRIVERS
    reason: str  # one sentence naming the input and its value
    stale: tuple[str, ...]  # names of stale/missing inputs that a decision needed
    pool: str = ""  # "" (the whole model) or one of POOLS (a disaggregated model's pool)


def _need(rps: float, capacity: float, headroom: float) -> int:
    return max(0, math.ceil(rps * (1 + headroom) / capacity - _EPS))


def _fresh(policy: ScalingPolicy, inputs: ScalingInputs, now: float) -> dict[str, float | None]:
    """Each input's value, ``None`` where it is missing or older than ``stale_after_s``."""
    values: dict[str, float | None] = {}
    for name in INPUTS:
        value: float | None = getattr(inputs, name)
        at = inputs.input_times.get(name)
        if value is not None and at is not None and now - at > policy.stale_after_s:
            value = None
        values[name] = value
    return values


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def _reactive(
    policy: ScalingPolicy, n: int, v: Mapping[str, float | None]
) -> list[tuple[int, str, str]]:
    """The reactive rules that fire: (instances, driver, reason)."""
    fired: list[tuple[int, str, str]] = []
    queue, rate = v["queue_per_instance"], v["service_rate_rps"]
    if queue is not None and rate is not None and rate > 0:
        limit = policy.queue_factor * rate
        if queue > limit:
            want = max(n + 1, math.ceil(n * queue / limit - _EPS))
            fired.append(
                (
                    want,
                    "queue",
                    f"queue per instance {_fmt(queue)} is above "
                    f"{_fmt(policy.queue_factor)} × service rate {_fmt(rate)} req/s",
                )
            )
    kv = v["kv_usage"]
    if kv is not None and kv >= policy.kv_usage_high:
        want = max(n + 1, math.ceil(n * kv / policy.kv_usage_high - _EPS))
        fired.append(
            (want, "kv_cache", f"KV-cache usage {kv:.0%} is at or above {policy.kv_usage_high:.0%}")
        )
    util = v["gpu_util"]
    waiting = queue is not None and queue >= GPU_UTIL_QUEUE
    if util is not None and util > policy.gpu_util_up and waiting:
        assert queue is not None
        want = max(n + 1, math.ceil(n * util / policy.gpu_util_up - _EPS))
        fired.append(
            (
                want,
                "gpu_util",
                f"GPU utilisation {util:.0%} is above {policy.gpu_util_up:.0%} with "
                f"{_fmt(queue)} requests waiting per instance",
            )
        )
    burn = v["burn_rate_short"]
    if burn is not None and burn > policy.burn_rate_high:
        fired.append(
            (
                n + 1,
                "burn_rate",
                f"short-window burn rate {_fmt(burn)} is above {_fmt(policy.burn_rate_high)}",
            )
        )
    return fired


def _target(
    policy: ScalingPolicy, inputs: ScalingInputs, v: Mapping[str, float | None]
) -> tuple[int | None, int | None, int | None, str, str]:
    """(predictive, reactive, raw target or None, driver, reason) before min/max and safety."""
    n = inputs.observed_instances
    predictive: int | None = None
    forecast, capacity = v["forecast_rps"], v["capacity_rps"]
    if forecast is not None and capacity is not None and capacity > 0:
        predictive = _need(forecast, capacity, policy.headroom)
    fired = _reactive(policy, n, v)
    reactive = max((f[0] for f in fired), default=None)
    if predictive is None and reactive is None:
        return None, None, None, "hold", ""
    if reactive is not None and (predictive is None or reactive > predictive):
        best = max(fired, key=lambda f: f[0])
        return predictive, reactive, best[0], best[1], best[2]
    assert predictive is not None
    assert forecast is not None
    assert capacity is not None
    basis = (
        " (the last lead time's busiest minute: no earlier week holds this model)"
        if inputs.forecast_basis == "recent"
        else ""
    )
    reason = (
        f"forecast peak {_fmt(forecast)} req/s within the {policy.lead_time_s:g} s lead time"
        f"{basis} × (1 + {policy.headroom:g} headroom) ÷ {_fmt(capacity)} req/s per instance "
        f"needs {predictive}"
    )
    return predictive, reactive, predictive, "forecast", reason


def below_scale_in_threshold(policy: ScalingPolicy, inputs: ScalingInputs, now: float) -> bool:
    """Whether load is below the scale-in threshold now: the (unclamped) target, from fresh
    inputs, is below the observed count. The caller keeps ``low_load_since`` from this."""
    v = _fresh(policy, inputs, now)
    _, _, raw, _, _ = _target(policy, inputs, v)
    return raw is not None and max(raw, policy.min_replicas) < inputs.observed_instances


def track_low_load(since: float | None, low: bool, now: float) -> float | None:
    """The next ``low_load_since``: kept while low, started when load turns low, else ``None``."""
    if not low:
        return None
    return now if since is None else since


def _scale_in(
    policy: ScalingPolicy,
    inputs: ScalingInputs,
    v: Mapping[str, float | None],
    now: float,
    target: tuple[int, str, str],
    predictive: int | None,
) -> tuple[int, str, str]:
    """The safety rules between a target below the observed count and the count recommended."""
    n = inputs.observed_instances
    desired, driver, reason = target
    needed = [name for name in ("capacity_rps", "demand_rps", "forecast_rps") if v[name] is None]
    demand, capacity, forecast = v["demand_rps"], v["capacity_rps"], v["forecast_rps"]
    if needed or demand is None or capacity is None or forecast is None:
        needs = ", ".join(needed)
        why = f"holding {n} instances: scaling in needs {needs}, which is stale or missing"
        return n, "hold", why
    if predictive is not None and predictive > _need(demand, capacity, policy.headroom):
        why = (
            f"holding {n} instances: demand {_fmt(demand)} req/s is forecast to rebound to "
            f"{_fmt(forecast)} req/s within the {policy.lead_time_s:g} s lead time"
        )
        return n, "rebound", why
    since = inputs.low_load_since
    low_for = 0.0 if since is None else max(0.0, now - since)
    if low_for < policy.scale_in_cooldown_s:
        why = (
            f"holding {n} instances: load has been below the scale-in threshold for "
            f"{low_for / 60:.0f} min of the {policy.scale_in_cooldown_s / 60:g} min cooldown "
            f"({reason})"
        )
        return n, "cooldown", why
    step = max(1, math.floor(n * policy.max_scale_in_fraction + _EPS))
    if desired < n - step:
        why = (
            f"{reason}; scaling in by at most {policy.max_scale_in_fraction:.0%} of {n} per "
            f"step, to {n - step}"
        )
        return n - step, "scale_in_step", why
    return desired, driver, reason


def recommend(policy: ScalingPolicy, inputs: ScalingInputs, now: float) -> Recommendation:
    """The desired instance count for ``inputs.model`` now, with its driver and reason."""
    if not math.isfinite(now):
        raise InvalidInput("now must be a finite unix time", details={"now": now})
    v = _fresh(policy, inputs, now)
    stale = tuple(name for name in INPUTS if v[name] is None)
    n = inputs.observed_instances
    predictive, reactive, raw, driver, reason = _target(policy, inputs, v)
    lo, hi = policy.min_replicas, policy.max_replicas
    if raw is None:
        missing = ", ".join(stale) or "none"
        desired, why = n, f"holding {n} instances: no usable input ({missing} stale or missing)"
    elif raw > hi:
        desired, driver, why = hi, "max", f"{reason}, capped at max_replicas {hi}"
    elif raw < lo:
        desired, driver, why = lo, "min", f"{reason}; raised to min_replicas {lo}"
    elif raw == n:
        desired, driver, why = n, "hold", f"holding {n} instances: {reason}"
    else:
        desired, why = raw, reason
    if desired < n:
        desired, driver, why = _scale_in(policy, inputs, v, now, (desired, driver, why), predictive)
    if desired > hi:  # a hold above a lowered max_replicas still obeys it
        desired, driver, why = hi, "max", f"{why}; capped at max_replicas {hi}"
    elif desired < lo:
        desired, driver, why = lo, "min", f"{why}; raised to min_replicas {lo}"
    return Recommendation(
        model=inputs.model,
        at=now,
        observed=n,
        desired=desired,
        predictive=predictive,
        reactive=reactive,
        forecast_rps=v["forecast_rps"],
        driver=driver,
        reason=why,
        stale=stale,
        pool=inputs.pool,
    )


def policy_for(policies: Sequence[ScalingPolicy], model: str) -> ScalingPolicy:
    """The policy of ``model``: its own, else the one for every model (``model=None``)."""
    fallback: ScalingPolicy | None = None
    for p in policies:
        if p.model == model:
            return p
        if p.model is None and fallback is None:
            fallback = p
    if fallback is None:
        raise NotFound(f"no scaling policy applies to model {model!r}", details={"model": model})
    return fallback
