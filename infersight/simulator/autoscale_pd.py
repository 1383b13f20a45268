"""The closed-loop scaling backtest of a disaggregated (prefill/decode) deployment, per pool.

``simulator.autoscale`` sizes one pool of identical instances with a fluid service model.
A split deployment has two pools that saturate apart (prefill on prompt compute, decode on
batch slots and the TPOT target), so this backtest runs the discrete-event simulator's own
``PdRouter`` — the llm-d-style proxy, the prefill and decode engines, the KV transfer — and
resizes each pool by its own policy:

* **Demand** is the same ``Demand`` the unsplit backtest replays (the synthetic diurnal day
  or a recorded one), as the rate of a Poisson process of user requests whose lengths are
  the scenario's mix; every policy sees the same arrivals. The gateway hands each user
  request to the decode proxies in rotation; the proxy sends the prompt to the prefill pool
  (round robin over the prefill engines that take work), then the request to its decode
  engine. Scenario faults are not replayed.
* **Per pool, each decision** (the policy's interval) sees an ``Observation`` of that pool
  only: its engines asked for and serving, their queue (vLLM's ``num_requests_waiting`` less
  the requests deferred for their KV cache, which wait on the transfer, not on the engine) and
  KV usage, the GPU utilisation DCGM reported for them over the last interval (cold-starting
  engines read 0); demand is the users' request rate (the same for both pools, as
  ``service.scaling`` gives it); the burn rate is the users' TTFT misses for the prefill pool
  and their TPOT misses for the decode pool over the last five minutes (``service.scaling``'s
  split of the SLOs between the pools).
* **Capacity per instance**, as the unsplit backtest takes it from the service model rather
  than a measurement: computed from the profile's step costs and the mix's lengths (a sample
  of 20,000). Prefill — the rate at which one prefill engine's mean queue stays under 10 % of
  the TTFT target (``service.scaling``'s ``PREFILL_QUEUE_SHARE`` rule), by Pollaczek–Khinchine
  on each prompt's prefill time (its tokens at the per-token cost plus its share of the step's
  fixed cost in a full ``max_num_batched_tokens`` batch). Decode — the rate at the largest
  batch whose step meets the TPOT target (the unsplit rule; a decode engine computes only the
  last prompt token, and reads the whole prompt's KV).
* **Resizing** mirrors the unsplit backtest: a new engine is paid for from the moment it is
  asked for and takes work after the cold start; removal cancels the newest cold-starting
  engine first, else takes the serving one that became ready last out of rotation. Unlike the
  fluid model's immediate removal, a removed serving engine drains what it holds (its
  requests finish) and is paid for until it is empty.
* **Accounting** per pool: GPU-hours (engines asked for plus draining, × tensor parallel),
  the instance count per step; per policy: the users' SLO attainment — a user request meets
  the SLO when its TTFT from the proxy's arrival (the simulator's user record) is within the
  TTFT target and its TPOT within the TPOT target (errors miss) — overall, during the
  rebound, and the worst minute. Requests still in flight at the window's end are given
  ``DRAIN_S`` to finish (GPU-hours count the window only).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Final

import numpy as np
import numpy.typing as npt

from infersight.core.capacity import DEFAULT_HEADROOM, instances_needed
from infersight.core.errors import InvalidInput
from infersight.core.records import RequestRecord
from infersight.core.scaling import ScalingPolicy
from infersight.simulator.autoscale import (
    BURN_WINDOW_S,
    DEMAND_WINDOW_S,
    REBOUND,
    SLO_OBJECTIVE,
    Demand,
    FloatArray,
    Infersight,
    Observation,
    Policy,
    ReactiveGpu,
    ReactiveQueue,
    Static,
    _clock,
    history_forecast,
    table_cells,
)
from infersight.simulator.disaggregated import PdRouter
from infersight.simulator.engine import InstanceSim
from infersight.simulator.faults import FaultSchedule
from infersight.simulator.profiles import ModelProfile
from infersight.simulator.scenario import Deployment, Scenario
from infersight.simulator.workload import ArrivalStream, RequestMix

POOLS: Final = ("prefill", "decode")
PREFILL_QUEUE_SHARE: Final = 0.1  # service.scaling's: a prefill minute counts under 10 % of TTFT
DRAIN_S: Final = 300.0
MIX_SAMPLE: Final = 20_000
PD_POLICIES: Final = ("static", "reactive-gpu", "reactive-queue", "infersight")


# -- capacity per pool -----------------------------------------------------------------------


@dataclass(frozen=True)
class PoolCapacity:
    """Requests per second one engine of each pool sustains within the targets."""

    prefill_rps: float
    decode_rps: float
    mean_input: float
    mean_output: float

    def of(self, pool: str) -> float:
        return self.prefill_rps if pool == "prefill" else self.decode_rps


def pool_capacity(
    profile: ModelProfile,
    mix: RequestMix,
    *,
    ttft_target_s: float,
    tpot_target_s: float,
    seed: int = 0,
) -> PoolCapacity:
    """Each pool's per-engine capacity from the profile's step costs and ``mix``'s lengths
    (see the module docstring)."""
    rng = np.random.default_rng(seed)
    inputs = np.minimum(mix.input.sample(rng, MIX_SAMPLE), profile.max_model_len - 1)
    outputs = np.minimum(mix.output.sample(rng, MIX_SAMPLE), mix.max_tokens).astype(np.float64)
    c = profile.step
    fixed = c.cpu_overhead_s + c.decode_base_s
    # Prefill: M/G/1 on each prompt's time; mean queue λ·E[S²] / (2(1 − λ·E[S])) ≤ q.
    per_token = c.prefill_per_token_s + fixed / profile.max_num_batched_tokens
    s = inputs.astype(np.float64) * per_token
    q = PREFILL_QUEUE_SHARE * ttft_target_s
    es, es2 = float(s.mean()), float((s * s).mean())
    prefill = 2 * q / (es2 + 2 * q * es)
    # Decode: the batch whose step meets the TPOT target, as ServiceModel.capacity_rps.
    mean_in, mean_out = float(inputs.mean()), float(outputs.mean())
    per_seq = (
        c.decode_per_seq_s
        + c.decode_per_kv_token_s * (mean_in + mean_out / 2)
        + c.prefill_per_token_s / mean_out
    )
    if tpot_target_s <= fixed + per_seq:
        raise InvalidInput(
            "the TPOT target is below one decode step of this profile",
            details={"step_s": fixed + per_seq},
        )
    batch = min(
        (tpot_target_s - fixed) / per_seq,
        float(profile.max_num_seqs),
        profile.kv_cache_tokens / (mean_in + mean_out),
    )
    decode = batch / (mean_out * (fixed + per_seq * batch))
    return PoolCapacity(prefill, decode, mean_in, mean_out)


# -- demand as user arrivals -------------------------------------------------------------------


@dataclass(frozen=True)
class _StepRates:
    """``Demand``'s arrivals per step as a piecewise-constant Poisson rate from t = 0. Past
    the window the rate is the peak's: those arrivals are never taken, but the stream's
    thinning always finds a next one (a silent tail would make it draw forever)."""

    demand: Demand
    #: The demand's rate per step and its peak, computed once (the thinning asks per batch).
    per_step: FloatArray = field(init=False)
    max_rate: float = field(init=False)

    def __post_init__(self) -> None:
        per_step = self.demand.rates()
        object.__setattr__(self, "per_step", per_step)
        object.__setattr__(self, "max_rate", float(per_step.max(initial=0.0)))

    def rates(self, t: FloatArray) -> FloatArray:
        rates = self.per_step
        i = (np.asarray(t) // self.demand.step_s).astype(np.int64)
        inside = (i >= 0) & (i < len(rates))
        out: FloatArray = np.where(inside, rates[np.clip(i, 0, len(rates) - 1)], self.max_rate)
        return out


# -- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolResult:
    pool: str
    capacity_rps: float
    gpu_hours: float
    scale_events: int
    replicas: npt.NDArray[np.int64]  # asked-for engines in each step
    ready: npt.NDArray[np.int64]  # serving engines in each step
    draining: npt.NDArray[np.int64]  # removed engines still finishing their requests
    drivers: dict[str, int] = field(default_factory=dict)

    @property
    def min_replicas(self) -> int:
        return int(self.replicas.min()) if len(self.replicas) else 0

    @property
    def max_replicas(self) -> int:
        return int(self.replicas.max()) if len(self.replicas) else 0

    @property
    def mean_replicas(self) -> float:
        return float(self.replicas.mean()) if len(self.replicas) else 0.0

    def timeline(self, times: FloatArray) -> str:
        """The most engines asked for in each twelfth of the window (whole 5 minutes at
        least): ``11:00 2 · 11:30 3 · …``."""
        if not len(times):
            return ""
        start = float(times[0])
        span = float(times[-1]) - start + 1.0
        every_s = 300.0 * max(1, math.ceil(span / 12 / 300.0))
        slots = ((times - start) // every_s).astype(np.int64)
        parts = []
        for k in range(int(slots[-1]) + 1):
            inside = self.replicas[slots == k]
            if len(inside):
                parts.append(f"{_clock(start + k * every_s)} {int(inside.max())}")
        return " · ".join(parts)

    def to_dict(self, times: FloatArray) -> dict[str, object]:
        return {
            "pool": self.pool,
            "capacity_rps": self.capacity_rps,
            "gpu_hours": self.gpu_hours,
            "scale_events": self.scale_events,
            "replicas_min": self.min_replicas,
            "replicas_max": self.max_replicas,
            "replicas_mean": self.mean_replicas,
            "timeline": self.timeline(times),
            "drivers": dict(sorted(self.drivers.items())),
        }


@dataclass(frozen=True)
class PdPolicyResult:
    name: str
    requests: int
    met: int
    ttft_met: int
    tpot_met: int
    errors: int
    rebound_requests: int
    rebound_met: int
    worst_minute_s: float
    worst_minute_attainment: float
    pools: tuple[PoolResult, PoolResult]  # prefill, decode
    price_per_gpu_hour: float

    def pool(self, name: str) -> PoolResult:
        return next(p for p in self.pools if p.pool == name)

    @property
    def gpu_hours(self) -> float:
        return sum(p.gpu_hours for p in self.pools)

    @property
    def cost(self) -> float:
        return self.gpu_hours * self.price_per_gpu_hour

    def share(self, count: int) -> float:
        return count / self.requests if self.requests else 1.0

    @property
    def attainment(self) -> float:
        return self.share(self.met)

    @property
    def rebound_attainment(self) -> float | None:
        return self.rebound_met / self.rebound_requests if self.rebound_requests else None

    def to_dict(self, times: FloatArray) -> dict[str, object]:
        return {
            "policy": self.name,
            "requests": self.requests,
            "attainment": self.attainment,
            "ttft_attainment": self.share(self.ttft_met),
            "tpot_attainment": self.share(self.tpot_met),
            "errors": self.errors,
            "rebound_attainment": self.rebound_attainment,
            "gpu_hours": self.gpu_hours,
            "cost": self.cost,
            "worst_minute": _clock(self.worst_minute_s),
            "worst_minute_attainment": self.worst_minute_attainment,
            "pools": [p.to_dict(times) for p in self.pools],
        }


@dataclass(frozen=True)
class PdBacktest:
    scenario: str
    model: str
    demand: Demand
    capacity: PoolCapacity
    policy: ScalingPolicy
    static_instances: dict[str, int]
    cold_start_s: float
    ttft_target_s: float
    tpot_target_s: float
    results: tuple[PdPolicyResult, ...]

    def result(self, name_prefix: str) -> PdPolicyResult:
        for r in self.results:
            if r.name.startswith(name_prefix):
                return r
        raise KeyError(name_prefix)

    def to_dict(self) -> dict[str, object]:
        times = self.demand.times
        return {
            "scenario": self.scenario,
            "model": self.model,
            "demand": self.demand.source,
            "window": f"{_clock(float(times[0]))}–{_clock(float(times[-1]) + self.demand.step_s)}",
            "cold_start_s": self.cold_start_s,
            "ttft_target_s": self.ttft_target_s,
            "tpot_target_s": self.tpot_target_s,
            "capacity_rps": {p: self.capacity.of(p) for p in POOLS},
            "static_instances": self.static_instances,
            "results": [r.to_dict(times) for r in self.results],
        }


# -- the closed loop -------------------------------------------------------------------------


class _PoolState:
    """One pool's policy, its decisions and its per-step record."""

    def __init__(self, role: str, policy: Policy, steps: int) -> None:
        self.role, self.policy = role, policy
        self.next_decision = -math.inf
        self.events = 0
        self.replicas = np.zeros(steps, dtype=np.int64)
        self.ready = np.zeros(steps, dtype=np.int64)
        self.draining = np.zeros(steps, dtype=np.int64)


class _PdLoop:
    """One policy pair's deployment through the window: serve a step, observe, resize."""

    def __init__(
        self,
        scenario: Scenario,
        deployment: Deployment,
        demand: Demand,
        initial: dict[str, int],
        *,
        cold_start_s: float,
        ttft_target_s: float,
        tpot_target_s: float,
        seed: int,
    ) -> None:
        pd = deployment.disaggregated
        assert pd is not None
        self.deployment, self.demand = deployment, demand
        self.cold_start_s = cold_start_s
        self.ttft_target_s, self.tpot_target_s = ttft_target_s, tpot_target_s
        day = scenario.start.replace(hour=0, minute=0, second=0, microsecond=0)
        self.epoch = day + timedelta(seconds=demand.start_s)
        self.seed = seed
        self.prefix = pd.prefill[0].rsplit("-", 1)[0] if "-" in pd.prefill[0] else "pd"
        self.made = dict.fromkeys(POOLS, 0)
        sims = {role: [self._engine(role) for _ in range(initial[role])] for role in POOLS}
        self.router = PdRouter(
            pd,
            sims["prefill"],
            sims["decode"],
            [],
            [FaultSchedule(()) for _ in sims["decode"]],
            np.random.default_rng([seed, 1 << 20]),
            self.epoch,
        )
        self.stream = ArrivalStream(
            _StepRates(demand),
            deployment.mix,
            np.random.default_rng([seed, 1 << 21]),
            FaultSchedule(()),
            max_input_tokens=deployment.profile.max_model_len - 1,
        )
        self.arrived: deque[float] = deque()  # arrival times within the demand window
        self.arrivals_total = 0
        self.outcomes: deque[tuple[float, bool, bool]] = deque()  # (end, ttft ok, tpot ok)
        self.util: dict[str, float] = {}  # each engine's GPU utilisation, last sample
        self.records: list[RequestRecord] = []
        self.prefill_errors = 0

    def _engine(self, role: str, at: float = 0.0) -> InstanceSim:
        k = self.made[role]
        self.made[role] += 1
        d = self.deployment
        sim = InstanceSim(
            f"{self.prefix}-{role}-{k}",
            d.profile,
            epoch=self.epoch,
            rng=np.random.default_rng([self.seed, POOLS.index(role), k]),
            sampling=(d.mix.temperature, d.mix.top_p),
            speculative=d.speculative if role == "decode" else None,
            role=role,
        )
        if at > 0:  # an engine asked for mid-window starts idle now, not at t = 0
            sim.advance_to(at)
            sim.drain()
        return sim

    def serve(self, t_end: float) -> None:
        for a in self.stream.pop_until(t_end):
            self.router.submit(a)
            self.arrived.append(a.t)
            self.arrivals_total += 1
        self._collect(t_end)

    def _collect(self, t_end: float) -> None:
        batch = self.router.advance_to(t_end)
        for g in batch.gpu_samples:
            if g.util_gpu is not None:
                self.util[f"{g.instance}/{g.gpu_index}"] = g.util_gpu
        for c in batch.completions:
            if c.pd is not None:
                self.records.append(c.record)
                ok_ttft, ok_tpot = self._meets(c.record)
                end = (c.record.start - self.epoch).total_seconds() + (c.record.e2e_s or 0.0)
                self.outcomes.append((end, ok_ttft, ok_tpot))
            elif c.record.is_error:  # the proxy answered the user with the prefill's error
                self.records.append(c.record)
                self.prefill_errors += 1

    def _meets(self, r: RequestRecord) -> tuple[bool, bool]:
        if r.is_error:
            return False, False
        ttft = r.ttft_s is not None and r.ttft_s <= self.ttft_target_s + 1e-12
        tpot = r.tpot_s is None or r.tpot_s <= self.tpot_target_s + 1e-12
        return ttft, tpot

    def observe(self, role: str, t: float) -> Observation:
        router = self.router
        members = router.members(role)
        serving = [s for s in members if router.takes_work(s, t)]
        while self.arrived and self.arrived[0] <= t - DEMAND_WINDOW_S:
            self.arrived.popleft()
        while self.outcomes and self.outcomes[0][0] <= t - BURN_WINDOW_S:
            self.outcomes.popleft()
        tp = self.deployment.profile.tensor_parallel
        util = sum(self.util.get(f"{s.name}/{g}", 0.0) for s in serving for g in range(tp)) / max(
            1, len(members) * tp
        )
        kv = [s.kv_used / max(1, s.profile.kv_cache_tokens) for s in serving]
        burn = None
        if self.outcomes:
            ok = sum(o[1] if role == "prefill" else o[2] for o in self.outcomes)
            burn = (len(self.outcomes) - ok) / len(self.outcomes) / (1 - SLO_OBJECTIVE)
        return Observation(
            t=self.demand.start_s + t,
            replicas=len(members),
            ready=len(serving),
            demand_rps=len(self.arrived) / min(DEMAND_WINDOW_S, max(t, self.demand.step_s)),
            queue=float(sum(s.waiting - s.deferred for s in serving)),
            gpu_util=min(1.0, util),
            kv_usage=min(1.0, sum(kv) / len(kv)) if kv else 0.0,
            burn_rate=burn,
        )

    def resize(self, role: str, t: float, want: int) -> bool:
        have = len(self.router.members(role))
        for _ in range(want - have):
            self.router.add(self._engine(role, t), t + self.cold_start_s)
        for _ in range(have - want):
            self.router.retire(role, t)
        return want != have


def run_pd_policy(
    name: str,
    policies: dict[str, Policy],
    scenario: Scenario,
    deployment: Deployment,
    demand: Demand,
    initial: dict[str, int],
    capacity: PoolCapacity,
    *,
    cold_start_s: float,
    ttft_target_s: float,
    tpot_target_s: float,
    price_per_gpu_hour: float,
) -> PdPolicyResult:
    """One policy per pool through the window: serve → observe each pool → decide → resize."""
    loop = _PdLoop(
        scenario,
        deployment,
        demand,
        initial,
        cold_start_s=cold_start_s,
        ttft_target_s=ttft_target_s,
        tpot_target_s=tpot_target_s,
        seed=scenario.seed,
    )
    dt, steps = demand.step_s, len(demand.arrivals)
    pools = {role: _PoolState(role, policies[role], steps) for role in POOLS}
    for k in range(steps):
        t_end = (k + 1) * dt
        loop.serve(t_end)
        for state in pools.values():
            state.replicas[k] = len(loop.router.members(state.role))
            state.ready[k] = sum(
                loop.router.takes_work(s, k * dt) for s in loop.router.members(state.role)
            )
            state.draining[k] = len(loop.router.draining(state.role))
            if t_end >= state.next_decision:
                state.next_decision = t_end + state.policy.interval_s - 1e-9
                want = state.policy.desired(loop.observe(state.role, t_end))
                state.events += loop.resize(state.role, t_end, want)
    loop._collect(steps * dt + DRAIN_S)  # let the window's last requests finish
    return _pd_result(name, loop, pools, demand, capacity, price_per_gpu_hour)


def _pd_result(
    name: str,
    loop: _PdLoop,
    pools: dict[str, _PoolState],
    demand: Demand,
    capacity: PoolCapacity,
    price: float,
) -> PdPolicyResult:
    times = demand.times
    tp = loop.deployment.profile.tensor_parallel
    first_minute = int(times[0] // 60)
    n_minutes = int((times[-1] + demand.step_s - 1e-9) // 60) - first_minute + 1
    per_req = np.zeros(n_minutes)
    per_met = np.zeros(n_minutes)
    met = ttft_met = tpot_met = errors = rebound_req = rebound_met = 0
    for r in loop.records:
        at = demand.start_s + (r.start - loop.epoch).total_seconds()
        ok_ttft, ok_tpot = loop._meets(r)
        ok = ok_ttft and ok_tpot
        met += ok
        ttft_met += ok_ttft
        tpot_met += ok_tpot
        errors += r.is_error
        minute = min(max(int(at // 60) - first_minute, 0), n_minutes - 1)
        per_req[minute] += 1
        per_met[minute] += ok
        if REBOUND[0] <= at < REBOUND[1]:
            rebound_req += 1
            rebound_met += ok
    worst_i, worst = first_minute, 1.0
    busy = per_req > 0
    if busy.any():
        shares = np.where(busy, per_met / np.where(busy, per_req, 1.0), np.inf)
        i = int(np.argmin(shares))
        worst_i, worst = first_minute + i, float(shares[i])
    results = tuple(
        PoolResult(
            pool=role,
            capacity_rps=capacity.of(role),
            gpu_hours=float((s.replicas + s.draining).sum()) * tp * demand.step_s / 3600.0,
            scale_events=s.events,
            replicas=s.replicas,
            ready=s.ready,
            draining=s.draining,
            drivers=dict(getattr(s.policy, "reasons", {})),
        )
        for role, s in pools.items()
    )
    return PdPolicyResult(
        name=name,
        requests=loop.arrivals_total,
        met=met,
        ttft_met=ttft_met,
        tpot_met=tpot_met,
        errors=errors,
        rebound_requests=rebound_req,
        rebound_met=rebound_met,
        worst_minute_s=worst_i * 60.0,
        worst_minute_attainment=worst,
        pools=(results[0], results[1]),
        price_per_gpu_hour=price,
    )


def split_deployment(scenario: Scenario) -> Deployment:
    """The scenario's one disaggregated deployment (refused: none, or several)."""
    split = [d for d in scenario.deployments if d.disaggregated is not None]
    if len(split) != 1:
        raise InvalidInput(
            f"a P/D backtest needs exactly one disaggregated deployment; {scenario.name} has "
            f"{len(split)}",
            details={"scenario": scenario.name},
        )
    return split[0]


def pd_backtest(
    scenario: Scenario,
    demand: Demand,
    policy: ScalingPolicy,
    *,
    cold_start_s: float,
    ttft_target_s: float = 2.0,
    tpot_target_s: float = 0.1,
    price_per_gpu_hour: float = 4.0,
    headroom: float = DEFAULT_HEADROOM,
    queue_target: float = 5.0,
    only: Sequence[str] = ("static", "infersight"),
    progress: Callable[[str, int, int], None] | None = None,
) -> PdBacktest:
    """Every policy in ``only`` on the scenario's split deployment, one policy per pool, on
    the same arrivals; static sizes each pool for the window's peak minute with the capacity
    planner's headroom, the others start sized for the first five minutes."""
    unknown = sorted(set(only) - set(PD_POLICIES))
    if unknown:
        raise InvalidInput(f"unknown policies {unknown}; choose from {list(PD_POLICIES)}")
    deployment = split_deployment(scenario)
    capacity = pool_capacity(
        deployment.profile,
        deployment.mix,
        ttft_target_s=ttft_target_s,
        tpot_target_s=tpot_target_s,
        seed=scenario.seed,
    )
    peak = max(demand.peak_minute_rps(), 1e-9)
    first = float(demand.arrivals[: max(1, round(DEMAND_WINDOW_S / demand.step_s))].mean())
    static_n = {p: max(1, instances_needed(peak, capacity.of(p), headroom)) for p in POOLS}
    initial = {
        p: max(
            1,
            policy.min_replicas,
            instances_needed(first / demand.step_s, capacity.of(p), headroom),
        )
        for p in POOLS
    }
    tuned = ScalingPolicy(**{**policy.__dict__, "lead_time_s": cold_start_s})
    forecast = history_forecast(demand, cold_start_s)

    def makers(name: str, pool: str) -> Policy:
        lo, hi = max(1, policy.min_replicas), policy.max_replicas
        if name == "static":
            return Static(static_n[pool])
        if name == "reactive-gpu":
            return ReactiveGpu(lo, hi)
        if name == "reactive-queue":
            return ReactiveQueue(lo, hi, target_per_instance=queue_target)
        return Infersight(tuned, capacity.of(pool), forecast, pool=pool)

    chosen = [name for name in PD_POLICIES if name in only]
    results = []
    for i, name in enumerate(chosen):
        if progress is not None:
            progress(name, i, len(chosen))
        per_pool = {pool: makers(name, pool) for pool in POOLS}
        results.append(
            run_pd_policy(
                per_pool["prefill"].name,
                per_pool,
                scenario,
                deployment,
                demand,
                static_n if name == "static" else initial,
                capacity,
                cold_start_s=cold_start_s,
                ttft_target_s=ttft_target_s,
                tpot_target_s=tpot_target_s,
                price_per_gpu_hour=price_per_gpu_hour,
            )
        )
    if progress is not None:
        progress("done", len(chosen), len(chosen))
    return PdBacktest(
        scenario=scenario.name,
        model=deployment.profile.model_name,
        demand=demand,
        capacity=capacity,
        policy=tuned,
        static_instances=static_n,
        cold_start_s=cold_start_s,
        ttft_target_s=ttft_target_s,
        tpot_target_s=tpot_target_s,
        results=tuple(results),
    )


def pd_table(result: PdBacktest) -> str:
    """Per policy: the users' SLO attainment, then each pool's GPU-hours and instance counts."""
    static = next((r for r in result.results if r.name.startswith("static")), None)
    times = result.demand.times
    width = max(24, *(len(r.name) for r in result.results))
    head = (
        f"{'policy':<{width}} {'SLO met':>8} {'TTFT ok':>8} {'TPOT ok':>8} {'rebound':>8} "
        f"{'GPU-h':>8} {'vs static':>9} {'cost':>9} {'worst minute':>16}"
    )
    lines = [head, "-" * len(head)]
    for r in result.results:
        rebound, ratio, worst = table_cells(r, static)
        lines.append(
            f"{r.name:<{width}} {100 * r.attainment:>7.2f}% {100 * r.share(r.ttft_met):>7.2f}% "
            f"{100 * r.share(r.tpot_met):>7.2f}% {rebound:>8} {r.gpu_hours:>8.1f} {ratio:>9} "
            f"{r.cost:>9.2f} {worst:>16}"
        )
        for p in r.pools:
            lines.append(
                f"  {p.pool + ' pool':<{width - 2}} {'':>8} {'':>8} {'':>8} {'':>8} "
                f"{p.gpu_hours:>8.1f} {'':>9} {'':>9} events {p.scale_events}, "
                f"instances {p.min_replicas}–{p.max_replicas} (mean {p.mean_replicas:.1f}): "
                f"{p.timeline(times)}"
            )
    return "\n".join(lines)


def pd_header(result: PdBacktest) -> str:
    times = result.demand.times
    end = float(times[-1]) + result.demand.step_s
    return "\n".join(
        [
            f"P/D backtest of {result.scenario} ({result.model}): one policy per pool, "
            f"{_clock(float(times[0]))}–{_clock(end)}",
            f"demand: {result.demand.source}",
            f"targets: TTFT ≤ {result.ttft_target_s:g} s from the proxy's arrival, "
            f"TPOT ≤ {result.tpot_target_s:g} s; cold start {result.cold_start_s:g} s",
            f"capacity per instance: prefill {result.capacity.prefill_rps:.2f} req/s, "
            f"decode {result.capacity.decode_rps:.2f} req/s (mean prompt "
            f"{result.capacity.mean_input:.0f}, output {result.capacity.mean_output:.0f} tokens)",
            f"static sizing: prefill {result.static_instances['prefill']}, decode "
            f"{result.static_instances['decode']} (peak × (1 + 0.4 headroom))",
            f"recommender policy: {result.policy.name} (lead time = cold start)",
        ]
    )
