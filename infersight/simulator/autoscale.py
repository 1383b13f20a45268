"""The closed-loop scaling backtest: one day of demand through a simulated fleet whose size a
policy under test changes, in virtual time.

Every policy sees the **same** demand (one array of arrivals per step, drawn once from the
seed) and the same fleet model; only the decisions differ:

* ``static`` — sized once for the day's peak with the capacity planner's headroom
  (``core.capacity.instances_needed``); never scales;
* ``reactive-gpu`` — GPU utilisation 70 % up / 30 % for 30 minutes down, as KEDA / HPA users
  configure it (HPA's ``ceil(n × util / target)``; instances still cold-starting report no
  utilisation, which HPA counts as 0 % when it scales up);
* ``reactive-queue`` — a KEDA Prometheus trigger on ``sum(vllm:num_requests_waiting)`` with an
  ``AverageValue`` target per instance, HPA's 300 s scale-down stabilisation window;
* ``infersight`` — ``core.scaling.recommend`` every 60 s (the live job's default interval) on
  ``ScalingInputs`` built from the simulated fleet: the forecast from the history weeks (the
  busiest minute of each week's ``[t, t + lead time]``, averaged, as ``service.scaling`` does),
  the queue, KV-cache usage, GPU utilisation and the latency SLO's 5-minute burn rate.

**The fleet.** One model on ``tensor_parallel`` GPUs per instance. A new instance is paid for
from the moment it is asked for and serves only after the cold start; removal is immediate (a
cold-starting instance is cancelled before a serving one is removed). The per-instance service
model is the engine's step-cost model (``simulator.profiles.StepCosts``) in fluid form: with
``B`` sequences in the batch a step takes ``a + s·B`` seconds (``a`` = CPU scheduling + the
forward pass's fixed cost; ``s`` = per-sequence cost + its KV reads + its share of chunked
prefill), so an instance serves ``B / (output_tokens · step(B))`` req/s, at most with the batch
full (``max_num_seqs`` or the KV cache, whichever binds) — the saturation rate ``μ``. The SLO
capacity (what the recommender and the static sizing divide by) is that rate at the largest
batch whose step still meets the TPOT target.

**Per step** (10 s by default), with ``n`` serving instances: arrivals join a FIFO backlog that
carries over; the pool serves at most ``n·μ·dt``. A request's TTFT is its wait in the queue
(the fluid backlog ahead of it ÷ ``n·μ``) plus tokenisation, its prefill and one step; its TPOT
is the step time at the batch the served rate implies (``B = λ·out·a / (1 − λ·out·s)``, full
when saturated). A request *meets the SLO* when both are within their targets. GPU utilisation
is what DCGM reports — the share of time a kernel runs, ``1 − e^(−B)`` for a Poisson-occupied
batch — so it reads near 100 % with any real batch, as the essay warns.

The wait is computed from the queue at a request's arrival and the serving capacity at that
moment; instances that become ready while it waits would shorten it, so the model is slightly
pessimistic for every autoscaler alike (never for ``static``, which never changes).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import numpy as np
import numpy.typing as npt

from infersight.core.capacity import DEFAULT_HEADROOM, instances_needed
from infersight.core.errors import InvalidInput
from infersight.core.scaling import (
    ScalingInputs,
    ScalingPolicy,
    below_scale_in_threshold,
    recommend,
    track_low_load,
)
from infersight.simulator.profiles import ModelProfile

DAY_S: Final = 86_400.0
DEFAULT_STEP_S: Final = 10.0
DEFAULT_PEAK_RPS: Final = 200.0
DEFAULT_COLD_START_S: Final = 600.0
HISTORY_WEEKS: Final = 4
#: The essay's afternoon rebound: back to near-peak after the quiet spell.
REBOUND: Final = (14 * 3600.0, 14 * 3600.0 + 20 * 60.0)
#: The latency SLOs' objective behind the burn rate given to the recommender.
SLO_OBJECTIVE: Final = 0.99
BURN_WINDOW_S: Final = 300.0
DEMAND_WINDOW_S: Final = 300.0  # "demand now": the last five minutes, as the live job reads it
MAX_STEPS: Final = 100_000

FloatArray = npt.NDArray[np.float64]

#: The diurnal curve as (hour of day, share of peak) keyframes, eased between neighbours:
#: night, a morning ramp from 07:00, the late-morning peak, the quiet spell 12:45–14:00 at 22 %,
#: the rebound 14:00–14:20 to near-peak, the afternoon, the evening decline.
KEYFRAMES: Final = (
    (0.0, 0.10),
    (6.5, 0.09),
    (7.0, 0.11),
    (10.0, 1.00),
    (12.5, 0.97),
    (12.75, 0.22),
    (14.0, 0.22),
    (14.0 + 20 / 60, 0.95),
    (17.0, 0.92),
    (23.0, 0.11),
    (24.0, 0.10),
)


# -- demand -------------------------------------------------------------------------------------


def curve(t_s: FloatArray) -> FloatArray:
    """The share of peak at each time of day (seconds since midnight), without noise."""
    hours = np.mod(np.asarray(t_s, dtype=np.float64), DAY_S) / 3600.0
    xs = np.array([k[0] for k in KEYFRAMES])
    ys = np.array([k[1] for k in KEYFRAMES])
    i = np.clip(np.searchsorted(xs, hours, side="right") - 1, 0, len(xs) - 2)
    x0, x1, y0, y1 = xs[i], xs[i + 1], ys[i], ys[i + 1]
    u = np.clip((hours - x0) / (x1 - x0), 0.0, 1.0)
    ease = 0.5 - 0.5 * np.cos(np.pi * u)  # cosine easing: no kinks at keyframes
    out: FloatArray = y0 + (y1 - y0) * ease
    return out


def _noise(rng: np.random.Generator, n_minutes: int, sigma: float) -> FloatArray:
    """Gentle multiplicative noise per minute: an AR(1) with correlation ~10 minutes."""
    phi = 0.9
    shocks = rng.normal(0.0, sigma * math.sqrt(1 - phi * phi), n_minutes)
    out = np.empty(n_minutes)
    level = rng.normal(0.0, sigma)
    for k in range(n_minutes):
        level = phi * level + shocks[k]
        out[k] = level
    factor: FloatArray = np.clip(1.0 + out, 0.5, 1.5)
    return factor


@dataclass(frozen=True)
class Demand:
    """Arrivals per step of one day (the day under test) and of its history weeks."""

    step_s: float
    start_s: float  # seconds since midnight of the first step
    arrivals: FloatArray  # requests arriving in each step
    history: tuple[FloatArray, ...]  # the same steps, 1, 2, … weeks earlier
    source: str  # one line: what the demand is

    def __post_init__(self) -> None:
        if not (math.isfinite(self.step_s) and 1.0 <= self.step_s <= 3600.0):
            raise InvalidInput("step_s must be in [1, 3600] seconds", details={"step": self.step_s})
        if not 1 <= len(self.arrivals) <= MAX_STEPS:
            raise InvalidInput(f"a backtest has 1–{MAX_STEPS} steps")
        if not np.all(np.isfinite(self.arrivals)) or np.any(self.arrivals < 0):
            raise InvalidInput("arrivals must be finite and ≥ 0")
        for week in self.history:
            if week.shape != self.arrivals.shape:
                raise InvalidInput("every history week must have the day's steps")

    @property
    def times(self) -> FloatArray:
        t: FloatArray = self.start_s + self.step_s * np.arange(len(self.arrivals), dtype=np.float64)
        return t

    def rates(self) -> FloatArray:
        out: FloatArray = self.arrivals / self.step_s
        return out

    def peak_minute_rps(self) -> float:
        return float(_minute_rates(self.arrivals, self.step_s).max(initial=0.0))


def synthetic(
    seed: int,
    *,
    peak_rps: float = DEFAULT_PEAK_RPS,
    step_s: float = DEFAULT_STEP_S,
    start_s: float = 0.0,
    end_s: float = DAY_S,
    history_weeks: int = HISTORY_WEEKS,
    noise: float = 0.04,
    history_scale: float = 1.0,
) -> Demand:
    """The diurnal day (``KEYFRAMES`` × ``peak_rps``) with seeded noise and Poisson arrivals;
    each history week is the same curve with its own noise (seeds ``seed + 1000·k``), scaled
    by ``history_scale`` (below 1: the day has outgrown its history, the forecast falls short)."""
    if not (math.isfinite(peak_rps) and 0 < peak_rps <= 1e6):
        raise InvalidInput("peak_rps must be in (0, 1e6]", details={"peak_rps": peak_rps})
    if not 0 <= start_s < end_s <= DAY_S:
        raise InvalidInput("the backtest window must lie within one day")
    if not 0 <= history_weeks <= 52:
        raise InvalidInput("history_weeks must be in [0, 52]")
    steps = round((end_s - start_s) / step_s)
    if not 1 <= steps <= MAX_STEPS:
        raise InvalidInput(f"a backtest has 1–{MAX_STEPS} steps", details={"steps": steps})
    t: FloatArray = start_s + step_s * np.arange(steps, dtype=np.float64)
    if not (math.isfinite(history_scale) and 0 < history_scale <= 100):
        raise InvalidInput("history_scale must be in (0, 100]")
    base = curve(t + step_s / 2) * peak_rps

    def one(week_seed: int, scale: float = 1.0) -> FloatArray:
        rng = np.random.default_rng(week_seed)
        minute = ((t - start_s) // 60).astype(np.int64)
        factor = _noise(rng, int(minute[-1]) + 1, noise)[minute]
        counts: FloatArray = rng.poisson(base * factor * scale * step_s).astype(np.float64)
        return counts

    return Demand(
        step_s=step_s,
        start_s=start_s,
        arrivals=one(seed),
        history=tuple(one(seed + 1000 * k, history_scale) for k in range(1, history_weeks + 1)),
        source=(
            f"synthetic diurnal day, peak {peak_rps:g} req/s, quiet 12:45–14:00 at 22 %, "
            f"rebound 14:00–14:20, seed {seed}, {history_weeks} history weeks"
            + (f" at {history_scale:g} × the day" if history_scale != 1.0 else "")
        ),
    )


def from_minutes(
    day: Sequence[float],
    history: Sequence[Sequence[float]],
    *,
    step_s: float = DEFAULT_STEP_S,
    source: str = "recorded demand",
) -> Demand:
    """Recorded requests per minute (``day``: 1440 counts from midnight) → steps; each minute's
    count is spread evenly over its steps (``step_s`` must divide 60)."""
    if not (1.0 <= step_s <= 60.0 and abs(60.0 / step_s - round(60.0 / step_s)) < 1e-9):
        raise InvalidInput("step_s must divide a minute", details={"step_s": step_s})
    per = round(60.0 / step_s)

    def spread(counts: Sequence[float]) -> FloatArray:
        arr = np.asarray(counts, dtype=np.float64)
        if arr.ndim != 1 or not 1 <= len(arr) <= 1440:
            raise InvalidInput("a recorded day has 1–1440 minutes")
        out: FloatArray = np.repeat(arr / per, per)
        return out

    return Demand(
        step_s=step_s,
        start_s=0.0,
        arrivals=spread(day),
        history=tuple(spread(w) for w in history),
        source=source,
    )


def _minute_rates(arrivals: FloatArray, step_s: float) -> FloatArray:
    """Requests per second in each whole minute (steps longer than a minute: per step)."""
    per = max(1, round(60.0 / step_s))
    n = len(arrivals) // per * per
    if n == 0:
        out: FloatArray = arrivals / step_s
        return out
    sums = arrivals[:n].reshape(-1, per).sum(axis=1)
    rates: FloatArray = sums / (per * step_s)
    return rates


# -- the fleet's service model --------------------------------------------------------------------


@dataclass(frozen=True)
class ServiceModel:
    """One instance of the model in fluid form (see the module docstring)."""

    profile: ModelProfile
    input_tokens: int = 512
    output_tokens: int = 256
    ttft_target_s: float = 2.0
    tpot_target_s: float = 0.1

    def __post_init__(self) -> None:
        if not (1 <= self.input_tokens <= 1_000_000 and 1 <= self.output_tokens <= 1_000_000):
            raise InvalidInput("input and output tokens must be in [1, 1e6]")
        if not (self.ttft_target_s > 0 and self.tpot_target_s > 0):
            raise InvalidInput("the TTFT and TPOT targets must be positive")
        if self.tpot_target_s <= self.fixed_step_s:
            raise InvalidInput(
                "the TPOT target is below one decode step of this profile",
                details={"step_s": self.fixed_step_s},
            )

    @property
    def fixed_step_s(self) -> float:
        c = self.profile.step
        return c.cpu_overhead_s + c.decode_base_s

    @property
    def per_seq_s(self) -> float:
        """Step time per sequence in the batch, with its KV reads and share of prefill."""
        c = self.profile.step
        kv = self.input_tokens + self.output_tokens / 2
        prefill_share = c.prefill_per_token_s * self.input_tokens / self.output_tokens
        return c.decode_per_seq_s + c.decode_per_kv_token_s * kv + prefill_share

    @property
    def max_batch(self) -> float:
        per_request = self.input_tokens + self.output_tokens
        return float(min(self.profile.max_num_seqs, self.profile.kv_cache_tokens // per_request))

    def step_s(self, batch: float) -> float:
        return self.fixed_step_s + self.per_seq_s * batch

    def rate_at(self, batch: float) -> float:
        """Requests per second one instance serves with ``batch`` sequences in flight."""
        return batch / (self.output_tokens * self.step_s(batch))

    @property
    def saturation_rps(self) -> float:
        return self.rate_at(self.max_batch)

    @property
    def capacity_rps(self) -> float:
        """The per-instance rate whose step still meets the TPOT target (and fits the batch)."""
        tpot_batch = (self.tpot_target_s - self.fixed_step_s) / self.per_seq_s
        return self.rate_at(min(self.max_batch, tpot_batch))

    def batch_for(self, rps: float) -> float:
        """The mean batch at which one instance serves ``rps`` (full at or past saturation)."""
        if rps <= 0:
            return 0.0
        x = rps * self.output_tokens
        denom = 1.0 - x * self.per_seq_s
        if denom <= 0:
            return self.max_batch
        return min(self.max_batch, x * self.fixed_step_s / denom)

    def base_ttft_s(self, batch: float) -> float:
        """TTFT without queueing: tokenising, the prompt's prefill and one step."""
        c = self.profile
        return (
            c.tokenizer.time(self.input_tokens)
            + c.step.prefill_per_token_s * self.input_tokens
            + self.step_s(batch)
        )

    def kv_usage(self, batch: float) -> float:
        used = batch * (self.input_tokens + self.output_tokens / 2)
        return min(1.0, used / max(1, self.profile.kv_cache_tokens))


def _share_within(q0: float, q1: float, limit: float) -> float:
    """The share of a step's uniform arrivals that see a queue ≤ ``limit`` when the fluid queue
    runs linearly from ``q0`` to ``q1`` (clipped at 0 on the way down)."""
    if q1 >= q0:  # growing (or flat)
        if q1 <= limit:
            return 1.0
        if q0 > limit:
            return 0.0
        return (limit - q0) / (q1 - q0)
    if q0 <= limit:
        return 1.0
    if q1 > limit:
        return 0.0
    return 1.0 - (q0 - limit) / (q0 - q1)


# -- policies ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Observation:
    """What a policy sees at the end of a step."""

    t: float  # virtual seconds since midnight
    replicas: int  # instances asked for (serving + cold-starting): HPA's currentReplicas
    ready: int
    demand_rps: float  # over the last DEMAND_WINDOW_S
    queue: float  # requests waiting, whole pool
    gpu_util: float  # mean over every replica, cold-starting ones reading 0
    kv_usage: float
    burn_rate: float | None  # latency SLO burn over the last BURN_WINDOW_S


class Policy(Protocol):
    name: str
    interval_s: float

    def desired(self, obs: Observation) -> int: ...


@dataclass
class Static:
    instances: int
    name: str = "static (peak)"
    interval_s: float = math.inf

    def desired(self, obs: Observation) -> int:
        return self.instances


@dataclass
class ReactiveGpu:
    """GPU utilisation 70 % up / 30 % for 30 minutes down (toward the 70 % target)."""

    min_replicas: int
    max_replicas: int
    up: float = 0.70
    down: float = 0.30
    down_for_s: float = 1800.0
    name: str = "reactive GPU util 70/30"
    interval_s: float = 15.0  # HPA's sync period
    _low_since: float | None = None

    def desired(self, obs: Observation) -> int:
        n = obs.replicas
        if obs.gpu_util < self.down:
            self._low_since = obs.t if self._low_since is None else self._low_since
        else:
            self._low_since = None
        want = n
        if obs.gpu_util > self.up:
            want = math.ceil(n * obs.gpu_util / self.up - 1e-9)
        elif self._low_since is not None and obs.t - self._low_since >= self.down_for_s:
            want = math.ceil(n * obs.gpu_util / self.up - 1e-9)
            self._low_since = None
        return min(self.max_replicas, max(self.min_replicas, want))


@dataclass
class ReactiveQueue:
    """KEDA on ``sum(vllm:num_requests_waiting)``, ``AverageValue`` target per instance, HPA's
    300 s scale-down stabilisation (the highest recommendation of the last 300 s)."""

    min_replicas: int
    max_replicas: int
    target_per_instance: float = 5.0
    stabilisation_s: float = 300.0
    name: str = "reactive KEDA queue"
    interval_s: float = 15.0
    _recent: deque[tuple[float, int]] = field(default_factory=deque)

    def desired(self, obs: Observation) -> int:
        want = math.ceil(obs.queue / self.target_per_instance - 1e-9)
        want = min(self.max_replicas, max(self.min_replicas, want))
        self._recent.append((obs.t, want))
        while self._recent and obs.t - self._recent[0][0] > self.stabilisation_s:
            self._recent.popleft()
        if want >= obs.replicas:
            return want
        return min(obs.replicas, max(w for _, w in self._recent))


@dataclass
class Infersight:
    """``core.scaling.recommend`` on inputs from the simulated fleet."""

    policy: ScalingPolicy
    capacity_rps: float
    forecast: Callable[[float], float | None]
    name: str = "infersight"
    interval_s: float = 60.0  # service.jobs' default scaling interval
    epoch: float = 1_790_000_000.0  # a unix time for virtual midnight (only differences matter)
    pool: str = ""  # "" (the whole model) or a disaggregated model's pool (autoscale_pd)
    _low_since: float | None = None
    reasons: dict[str, int] = field(default_factory=dict)

    def inputs(self, obs: Observation, now: float) -> ScalingInputs:
        forecast = self.forecast(obs.t)
        values: dict[str, Any] = {
            "capacity_rps": self.capacity_rps,
            "demand_rps": obs.demand_rps,
            "forecast_rps": forecast,
            "queue_per_instance": obs.queue / max(obs.ready, 1),
            "service_rate_rps": self.capacity_rps,
            "kv_usage": obs.kv_usage,
            "burn_rate_short": obs.burn_rate,
            "gpu_util": obs.gpu_util if obs.ready else None,
        }
        times = {k: now for k, v in values.items() if v is not None}
        return ScalingInputs(
            model="backtest",
            observed_instances=obs.replicas,
            low_load_since=self._low_since,
            input_times=times,
            pool=self.pool,
            **values,
        )

    def desired(self, obs: Observation) -> int:
        now = self.epoch + obs.t
        inputs = self.inputs(obs, now)
        low = below_scale_in_threshold(self.policy, inputs, now)
        self._low_since = track_low_load(self._low_since, low, now)
        inputs = ScalingInputs(**{**inputs.__dict__, "low_load_since": self._low_since})
        rec = recommend(self.policy, inputs, now)
        self.reasons[rec.driver] = self.reasons.get(rec.driver, 0) + 1
        return rec.desired


def history_forecast(demand: Demand, lead_time_s: float) -> Callable[[float], float | None]:
    """``service.scaling.Recommender.forecast`` over the simulated history: the mean over the
    weeks of the busiest minute in ``[t, t + lead]`` of each (``None`` without history)."""
    if not demand.history:
        return lambda t: None
    lead_minutes = max(1, math.ceil(lead_time_s / 60.0 - 1e-9))
    peaks = []
    for week in demand.history:
        minutes = _minute_rates(week, demand.step_s)
        padded = np.concatenate([minutes, np.full(lead_minutes, np.nan)])
        windows = np.lib.stride_tricks.sliding_window_view(padded, lead_minutes + 1)
        peaks.append(np.nanmax(windows, axis=1))
    mean = np.mean(np.vstack(peaks), axis=0)
    per_minute = max(60.0, demand.step_s)

    def forecast(t: float) -> float | None:
        i = int((t - demand.start_s) // per_minute)
        return float(mean[min(max(i, 0), len(mean) - 1)])

    return forecast


# -- the closed loop -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyResult:
    name: str
    requests: float
    met: float
    rebound_requests: float
    rebound_met: float
    gpu_hours: float
    cost: float
    scale_events: int
    worst_minute_s: float  # seconds since midnight of the minute with the lowest attainment
    worst_minute_attainment: float
    min_replicas: int
    max_replicas: int
    replicas: npt.NDArray[np.int64]  # asked-for instances in each step
    ready: npt.NDArray[np.int64]  # serving instances in each step
    drivers: dict[str, int] = field(default_factory=dict)

    @property
    def attainment(self) -> float:
        return self.met / self.requests if self.requests else 1.0

    @property
    def rebound_attainment(self) -> float | None:
        return self.rebound_met / self.rebound_requests if self.rebound_requests else None

    def to_dict(self) -> dict[str, object]:
        return {
            "policy": self.name,
            "requests": round(self.requests),
            "attainment": self.attainment,
            "rebound_attainment": self.rebound_attainment,
            "gpu_hours": self.gpu_hours,
            "cost": self.cost,
            "scale_events": self.scale_events,
            "worst_minute": _clock(self.worst_minute_s),
            "worst_minute_attainment": self.worst_minute_attainment,
            "replicas_min": self.min_replicas,
            "replicas_max": self.max_replicas,
            "drivers": dict(sorted(self.drivers.items())),
        }


def _clock(seconds: float) -> str:
    s = int(seconds) % int(DAY_S)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}"


@dataclass(frozen=True)
class Fleet:
    service: ServiceModel
    cold_start_s: float = DEFAULT_COLD_START_S
    price_per_gpu_hour: float = 4.0
    initial: int = 1  # instances serving at the first step

    def __post_init__(self) -> None:
        if not (math.isfinite(self.cold_start_s) and 0 <= self.cold_start_s <= DAY_S):
            raise InvalidInput("cold start must be in [0, 86400] s")
        if not (math.isfinite(self.price_per_gpu_hour) and self.price_per_gpu_hour >= 0):
            raise InvalidInput("the price per GPU-hour must be ≥ 0")
        if self.initial < 0:
            raise InvalidInput("the initial instance count must be ≥ 0")


class _Window:
    """A rolling sum of (requests, met) over the last ``length`` steps."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.items: deque[tuple[float, float]] = deque()
        self.requests = self.met = 0.0

    def add(self, requests: float, met: float) -> None:
        self.items.append((requests, met))
        self.requests += requests
        self.met += met
        if len(self.items) > self.length:
            old_r, old_m = self.items.popleft()
            self.requests -= old_r
            self.met -= old_m


class _Loop:
    """One policy's fleet through the day: serve a step, observe, resize."""

    def __init__(self, demand: Demand, fleet: Fleet) -> None:
        self.demand, self.fleet, self.svc = demand, fleet, fleet.service
        self.mu = self.svc.saturation_rps
        self.ready_at: list[float] = [-math.inf] * fleet.initial  # per instance asked for
        self.backlog = 0.0
        self.batch = 0.0
        self.serving = 0
        self.demand_window = _Window(max(1, round(DEMAND_WINDOW_S / demand.step_s)))
        self.burn_window = _Window(max(1, round(BURN_WINDOW_S / demand.step_s)))

    def serve(self, t: float, arrivals: float) -> float:
        """Serve the step starting at ``t``; the requests of it that meet both targets."""
        svc, dt = self.svc, self.demand.step_s
        n = self.serving = sum(1 for r in self.ready_at if r <= t)
        cap = n * self.mu  # req/s
        served = min(self.backlog + arrivals, cap * dt)
        after = self.backlog + arrivals - served
        lam = served / (n * dt) if n else 0.0
        self.batch = svc.batch_for(lam) if after <= 1e-9 else svc.max_batch
        share = 0.0
        if n and svc.step_s(self.batch) <= svc.tpot_target_s:
            allowed = (svc.ttft_target_s - svc.base_ttft_s(self.batch)) * cap
            share = _share_within(self.backlog, after, allowed) if allowed >= 0 else 0.0
        self.backlog = after
        met = arrivals * share
        self.demand_window.add(arrivals, met)
        self.burn_window.add(arrivals, met)
        return met

    def observe(self, t: float) -> Observation:
        asked = len(self.ready_at)
        util = (1.0 - math.exp(-self.batch)) * self.serving / asked if asked else 0.0
        w = self.burn_window
        burn = None
        if w.requests > 0:
            burn = max(0.0, w.requests - w.met) / w.requests / (1 - SLO_OBJECTIVE)
        window = self.demand_window
        return Observation(
            t=t,
            replicas=asked,
            ready=self.serving,
            demand_rps=window.requests / (len(window.items) * self.demand.step_s),
            queue=self.backlog,
            gpu_util=util,
            kv_usage=self.svc.kv_usage(self.batch),
            burn_rate=burn,
        )

    def resize(self, t: float, want: int) -> bool:
        """Ask for ``want`` instances from ``t``: new ones serve after the cold start; removal
        cancels cold-starting ones first (newest first), then serving ones."""
        have = len(self.ready_at)
        if want > have:
            self.ready_at.extend([t + self.fleet.cold_start_s] * (want - have))
        elif want < have:
            self.ready_at.sort()
            del self.ready_at[want:]
        return want != have


def run_policy(policy: Policy, demand: Demand, fleet: Fleet) -> PolicyResult:
    """One policy through the day: the closed loop of serve → observe → decide → resize."""
    loop = _Loop(demand, fleet)
    dt, steps = demand.step_s, len(demand.arrivals)
    tp = fleet.service.profile.tensor_parallel
    replicas = np.zeros(steps, dtype=np.int64)
    ready = np.zeros(steps, dtype=np.int64)
    met = np.zeros(steps)
    events = 0
    next_decision = demand.start_s
    for k in range(steps):
        t = demand.start_s + k * dt
        met[k] = loop.serve(t, float(demand.arrivals[k]))
        replicas[k], ready[k] = len(loop.ready_at), loop.serving
        if t + dt >= next_decision:
            next_decision = t + dt + policy.interval_s - 1e-9
            events += loop.resize(t + dt, policy.desired(loop.observe(t + dt)))
    return _result(policy, demand, fleet, replicas, ready, met, events, tp)


def _result(
    policy: Policy,
    demand: Demand,
    fleet: Fleet,
    replicas: npt.NDArray[np.int64],
    ready: npt.NDArray[np.int64],
    met: FloatArray,
    events: int,
    tp: int,
) -> PolicyResult:
    """The day's accounting from the per-step record."""
    arrivals, times = demand.arrivals, demand.times
    rebound = (times >= REBOUND[0]) & (times < REBOUND[1])
    minutes = (times // 60).astype(np.int64)
    first = int(minutes[0])
    per_req = np.bincount(minutes - first, weights=arrivals)
    per_met = np.bincount(minutes - first, weights=met)
    busy = per_req > 0
    worst_i, worst = first, 1.0
    if busy.any():
        shares = np.where(busy, per_met / np.where(busy, per_req, 1.0), np.inf)
        i = int(np.argmin(shares))
        worst_i, worst = first + i, float(shares[i])
    gpu_hours = float(replicas.sum()) * tp * demand.step_s / 3600.0
    return PolicyResult(
        name=policy.name,
        requests=float(arrivals.sum()),
        met=float(met.sum()),
        rebound_requests=float(arrivals[rebound].sum()),
        rebound_met=float(met[rebound].sum()),
        gpu_hours=gpu_hours,
        cost=gpu_hours * fleet.price_per_gpu_hour,
        scale_events=events,
        worst_minute_s=worst_i * 60.0,
        worst_minute_attainment=worst,
        min_replicas=int(replicas.min()),
        max_replicas=int(replicas.max()),
        replicas=replicas,
        ready=ready,
        drivers=dict(getattr(policy, "reasons", {})),
    )


@dataclass(frozen=True)
class Backtest:
    demand: Demand
    fleet: Fleet
    policy: ScalingPolicy
    static_instances: int
    results: tuple[PolicyResult, ...]

    def result(self, name_prefix: str) -> PolicyResult:
        for r in self.results:
            if r.name.startswith(name_prefix):
                return r
        raise KeyError(name_prefix)


def _maker(
    cls: type[Infersight], policy: ScalingPolicy, capacity: float, forecast: Any, name: str
) -> Callable[[], Policy]:
    return lambda: cls(policy, capacity, forecast, name=name)


POLICIES: Final = ("static", "reactive-gpu", "reactive-queue", "infersight")


def backtest(
    demand: Demand,
    service: ServiceModel,
    policy: ScalingPolicy,
    *,
    cold_start_s: float = DEFAULT_COLD_START_S,
    price_per_gpu_hour: float = 4.0,
    headroom: float = DEFAULT_HEADROOM,
    queue_target: float = 5.0,
    only: Sequence[str] = POLICIES,
    variants: Sequence[tuple[str, ScalingPolicy]] = (),
    progress: Callable[[str, int, int], None] | None = None,
) -> Backtest:
    """Every policy in ``only`` on the same demand and fleet; the recommender's lead time is the
    cold start (its forecast horizon), the rest of its policy as given. ``variants`` adds a
    recommender row per (label, policy) — another ScalingPolicy on the same day."""
    unknown = sorted(set(only) - set(POLICIES))
    if unknown:
        raise InvalidInput(f"unknown policies {unknown}; choose from {list(POLICIES)}")
    capacity = service.capacity_rps
    peak = demand.peak_minute_rps()
    static_n = instances_needed(max(peak, 1e-9), capacity, headroom)
    first = float(demand.arrivals[: max(1, round(DEMAND_WINDOW_S / demand.step_s))].mean())
    initial = max(policy.min_replicas, instances_needed(first / demand.step_s, capacity, headroom))

    def lead(p: ScalingPolicy) -> ScalingPolicy:
        return ScalingPolicy(**{**p.__dict__, "lead_time_s": cold_start_s})

    tuned = lead(policy)
    forecast = history_forecast(demand, cold_start_s)
    makers: dict[str, Callable[[], Policy]] = {
        "static": lambda: Static(static_n),
        "reactive-gpu": lambda: ReactiveGpu(policy.min_replicas, policy.max_replicas),
        "reactive-queue": lambda: ReactiveQueue(
            policy.min_replicas, policy.max_replicas, target_per_instance=queue_target
        ),
        "infersight": lambda: Infersight(tuned, capacity, forecast),
    }
    chosen = [name for name in POLICIES if name in only]
    if "infersight" in only:
        for label, variant in variants:
            key = f"infersight ({label})"
            makers[key] = _maker(Infersight, lead(variant), capacity, forecast, name=key)
            chosen.append(key)
    results = []
    for i, name in enumerate(chosen):
        if progress is not None:
            progress(name, i, len(chosen))
        fleet = Fleet(
            service,
            cold_start_s=cold_start_s,
            price_per_gpu_hour=price_per_gpu_hour,
            initial=static_n if name == "static" else initial,
        )
        results.append(run_policy(makers[name](), demand, fleet))
    if progress is not None:
        progress("done", len(chosen), len(chosen))
    fleet = Fleet(service, cold_start_s, price_per_gpu_hour)
    return Backtest(demand, fleet, tuned, static_n, tuple(results))


def table_cells(r: Any, static: Any) -> tuple[str, str, str]:
    """A result's rebound attainment, GPU-hours against static sizing's and worst minute, as
    the tables print them (``r`` and ``static``: results with those figures)."""
    rebound = "n/a" if r.rebound_attainment is None else f"{100 * r.rebound_attainment:.2f}%"
    ratio = f"{100 * r.gpu_hours / static.gpu_hours:.0f}%" if static else "n/a"
    worst = (
        f"{_clock(r.worst_minute_s)} {100 * r.worst_minute_attainment:.1f}%"
        if r.worst_minute_attainment < 1.0 - 1e-12
        else "none missed"
    )
    return rebound, ratio, worst


def table(result: Backtest) -> str:
    """The comparison as a plain-text table, static's GPU-hours the reference."""
    static = next((r for r in result.results if r.name.startswith("static")), None)
    width = max(26, *(len(r.name) for r in result.results))
    head = (
        f"{'policy':<{width}} {'SLO met':>8} {'rebound':>8} {'GPU-h':>8} {'vs static':>9} "
        f"{'cost':>9} {'events':>6} {'replicas':>9} {'worst minute':>16}"
    )
    lines = [head, "-" * len(head)]
    for r in result.results:
        rebound, ratio, worst = table_cells(r, static)
        lines.append(
            f"{r.name:<{width}} {100 * r.attainment:>7.2f}% {rebound:>8} {r.gpu_hours:>8.1f} "
            f"{ratio:>9} {r.cost:>9.2f} {r.scale_events:>6} "
            f"{f'{r.min_replicas}–{r.max_replicas}':>9} {worst:>16}"
        )
    return "\n".join(lines)
