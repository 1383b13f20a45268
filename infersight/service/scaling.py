"""The replica recommender's use case: ``ScalingInputs`` per model from the store, the
decision of ``core.scaling.recommend``, and one recorded recommendation per model per cycle.

Per model (the store's ``demand`` and ``samples``), at ``now``:

* observed instances — the instances whose newest scrape (within the policy's
  ``stale_after_s``) reports the model, else those that served it in the last five minutes;
* demand — requests per second over the last five complete minutes (minute rollups);
* forecast — the same time of day and day of week over the last ``history_weeks`` weeks: the
  busiest minute (or, past the minute rollups' retention, hour) of each week's
  ``[now − k weeks, now − k weeks + lead_time]``, averaged over the weeks that hold traffic;
* capacity per instance — the newest step run of the model (its best level within the latency
  SLOs' TTFT / TPOT thresholds, no further than the knee), else production's busiest
  instance-minute within them over the last week (``service.capacity``'s two measurements);
  cached for ``CAPACITY_TTL_S``;
* queue per instance and KV-cache usage — the newest scrape of each instance (the hottest
  data-parallel engine's KV usage where known); GPU utilisation — the mean over the last
  five minutes of those instances' GPUs;
* the short-window burn rate — the highest over the model's latency SLOs, counted over the
  burn-rate policy's shortest window;
* low load since — the start of the trailing run of minutes (looked for over twice the
  cooldown, at least an hour) whose demand, with the policy's headroom, fits one instance
  fewer; unknown (no scale-in by cooldown) without a capacity.

``input_times`` holds each input's newest sample, so that ``recommend`` can tell a stale one.

**Pools.** A disaggregated model (one whose instances stored prefill legs or decode-side split
requests in the last hour, ``store.demand.pool_members``) gets one recommendation per pool,
``prefill`` and ``decode``, each from its own instances only: the two pools saturate apart, and
one count for both would size neither. Per pool:

* observed instances, queue per instance, KV-cache usage and GPU utilisation — as above, of
  the pool's instances only (the instances that stored prefill legs, or decode-side requests,
  in the last hour);
* demand, forecast and low load — the users' requests, the same for both pools (each split
  request takes one prefill leg and one decode);
* capacity per instance — decode: production's busiest decode-instance-minute within the TPOT
  target (the user's TTFT includes the prefill pool's work, so it does not judge the decode
  pool); prefill: the most prefill legs one prefill instance completed in a minute of the last
  week while their mean queue time stayed within ``PREFILL_QUEUE_SHARE`` of the TTFT target
  (``PREFILL_QUEUE_DEFAULT_S`` without a TTFT SLO) — a prefill instance keeps its TTFT share
  only while legs do not wait; none such minute: unknown. A step run measures a whole
  deployment, not one pool's instance, so it does not size a pool;
* burn rate — the model's TTFT SLOs drive the prefill pool, its TPOT SLOs the decode pool,
  its availability SLOs both.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final

from infersight.core.burn import Policy
from infersight.core.errors import InvalidInput, NotFound, Unavailable
from infersight.core.loadtest import ScenarioKind, measured_capacity, summarise
from infersight.core.query import Selector
from infersight.core.scaling import (
    POOLS,
    Recommendation,
    ScalingInputs,
    ScalingPolicy,
    policy_for,
    recommend,
)
from infersight.core.slo import SliKind, SloSpec, burn_rate
from infersight.core.window import Resolution, Window
from infersight.storage.seam import (
    DECODE,
    MAX_MODELS,
    PREFILL,
    DemandMinute,
    RecordedDemand,
    Store,
)

log = logging.getLogger(__name__)
DEMAND_WINDOW: Final = timedelta(minutes=5)
PRODUCTION_CAPACITY_WINDOW: Final = timedelta(days=7)
CAPACITY_TTL_S: Final = 600.0
#: The burn-rate window when the policy gives none shorter.
SHORT_BURN_WINDOW: Final = timedelta(minutes=5)
#: The models considered each cycle: those seen over this last span.
MODELS_WINDOW: Final = timedelta(hours=1)
WEEK: Final = timedelta(days=7)
MAX_HISTORY_WEEKS: Final = 12
#: A prefill-instance-minute counts toward the prefill pool's capacity while its legs' mean
#: queue time stays within this share of the TTFT target (the rest of the target is the
#: prefill itself, the KV transfer and the first decode step) …
PREFILL_QUEUE_SHARE: Final = 0.1
#: … or within this many seconds when no TTFT SLO covers the model.
PREFILL_QUEUE_DEFAULT_S: Final = 0.05


def default_policy() -> ScalingPolicy:
    """The essay's defaults, for every model without a policy of its own."""
    return ScalingPolicy(name="default", model=None)


def policies(store: Store) -> list[ScalingPolicy]:
    return store.scaling.list_policies()


def choose_policy(stored: list[ScalingPolicy], model: str) -> ScalingPolicy:
    """The model's own policy, else the stored default, else ``default_policy()``."""
    if not any(p.model in (None, model) for p in stored):
        return default_policy()
    return policy_for(stored, model)


def latency_targets(specs: list[SloSpec], model: str) -> tuple[float | None, float | None]:
    """The tightest TTFT and TPOT thresholds of the latency SLOs covering ``model``."""
    ttft: list[float] = []
    tpot: list[float] = []
    for spec in specs:
        if spec.sli.kind is not SliKind.LATENCY or spec.selector.model not in (None, model):
            continue
        if spec.sli.metric == "ttft" and spec.sli.threshold_s is not None:
            ttft.append(spec.sli.threshold_s)
        elif spec.sli.metric == "tpot" and spec.sli.threshold_s is not None:
            tpot.append(spec.sli.threshold_s)
    return min(ttft, default=None), min(tpot, default=None)


def drives(spec: SloSpec, pool: str) -> bool:
    """Whether ``spec``'s burn rate drives ``pool``: every latency SLO a whole model; TTFT
    SLOs (and availability) a prefill pool; TPOT SLOs (and availability) a decode pool."""
    if not pool:
        return spec.sli.kind is SliKind.LATENCY
    if spec.sli.kind is SliKind.AVAILABILITY:
        return True
    wanted = "ttft" if pool == PREFILL else "tpot"
    return spec.sli.metric == wanted


def _unix(at: datetime) -> float:
    return at.timestamp()


class Recommender:
    """One cycle per call: inputs per model, a recommendation each, recorded."""

    def __init__(
        self,
        store: Store,
        burn_policy: Policy,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        # A scheduled job reading every model's windows: a statement may run past an API
        # answer's bound on a large store (its lock waits keep theirs).
        self.store = store.long_running()
        self.short_window = min(burn_policy.windows, default=SHORT_BURN_WINDOW)
        self.monotonic = monotonic
        self._capacity: dict[tuple[str, str], tuple[float, float | None, str]] = {}

    def __call__(self, now: datetime) -> list[Recommendation]:
        return self.run(now)

    def run(self, now: datetime) -> list[Recommendation]:
        """Recommend for every model seen in the last hour (for each pool of a disaggregated
        one) and record each."""
        stored = policies(self.store)
        specs = self.store.slos.all()
        hour = Window(now - MODELS_WINDOW, now)
        split = self.store.demand.pool_members(hour)
        models = sorted(set(self.store.demand.models_seen(hour)) | set(split))
        out: list[Recommendation] = []
        for model in models[:MAX_MODELS]:
            policy = choose_policy(stored, model)
            pools = split.get(model)
            for pool in POOLS if pools else ("",):
                members = None if pools is None else pools[pool]
                inputs = self.inputs(model, policy, specs, now, pool, members=members)
                rec = recommend(policy, inputs, _unix(now))
                self.store.scaling.record(rec)
                out.append(rec)
        return out

    # -- inputs -------------------------------------------------------------------------------

    def inputs(
        self,
        model: str,
        policy: ScalingPolicy,
        specs: list[SloSpec],
        now: datetime,
        pool: str = "",
        *,
        members: frozenset[str] | None = None,
    ) -> ScalingInputs:
        """``model``'s inputs at ``now``: of all its instances (``pool`` ""), or of one pool of
        a disaggregated model (``members``: the pool's instances, read when not given)."""
        members = self._members(model, pool, members, now)
        times: dict[str, float] = {}
        minute_now = Resolution.MINUTE.floor(now)
        recent = self.store.demand.minute_demand(
            model, Window(minute_now - DEMAND_WINDOW, minute_now)
        )
        gauges = self.store.samples.server_gauges(
            model,
            Window(now - timedelta(seconds=policy.stale_after_s), now),
            instances=members,
        )
        instances = set(gauges.instances) or self.working(model, pool, recent, members, now)
        observed = len(instances)

        demand: float | None = None
        if recent or gauges.newest is not None:
            demand = sum(m.requests for m in recent) / DEMAND_WINDOW.total_seconds()
            newest = [_unix(m.bucket) + Resolution.MINUTE.seconds for m in recent[-1:]]
            if gauges.newest is not None:
                newest.append(_unix(gauges.newest))
            times["demand_rps"] = max(newest)

        forecast, basis = self.forecast(model, policy, now), "weeks"
        if forecast is None:
            forecast, basis = self.recent_peak(model, policy, now), "recent"
        if forecast is not None:
            times["forecast_rps"] = _unix(now)

        capacity = self.capacity(model, specs, now, pool, members)
        if capacity is not None:
            times["capacity_rps"] = _unix(now)

        queue: float | None = None
        kv: float | None = None
        if gauges.newest is not None:
            if gauges.waiting:
                queue = sum(gauges.waiting) / max(len(gauges.instances), 1)
                times["queue_per_instance"] = _unix(gauges.newest)
            if gauges.kv_usage:
                kv = max(gauges.kv_usage)
                times["kv_usage"] = _unix(gauges.newest)

        service_rate = capacity
        if service_rate is None and demand and observed:
            service_rate = demand / observed
        if service_rate is not None:
            times["service_rate_rps"] = times.get("capacity_rps", times.get("demand_rps", 0.0))

        util, util_at = self.store.samples.gpu_utilisation(
            sorted(instances), Window(now - DEMAND_WINDOW, now)
        )
        if util is not None and util_at is not None:
            times["gpu_util"] = _unix(util_at)

        burn = self.burn_rate(model, specs, now, pool)
        if burn is not None:
            times["burn_rate_short"] = _unix(now)

        return ScalingInputs(
            model=model,
            observed_instances=observed,
            capacity_rps=capacity,
            demand_rps=demand,
            forecast_rps=forecast,
            queue_per_instance=queue,
            service_rate_rps=service_rate,
            kv_usage=kv,
            burn_rate_short=burn,
            gpu_util=util,
            low_load_since=self.low_load_since(model, policy, observed, capacity, now),
            input_times=times,
            forecast_basis=basis,
            pool=pool,
        )

    def _members(
        self, model: str, pool: str, given: frozenset[str] | None, now: datetime
    ) -> frozenset[str] | None:
        """The pool's instances: ``given``, else the last hour's; ``None`` for a whole model."""
        if not pool:
            return None
        if given is not None:
            return given
        return self.pool_members(model, pool, Window(now - MODELS_WINDOW, now))

    def pool_members(self, model: str, pool: str, window: Window) -> frozenset[str]:
        """The instances of ``model``'s ``pool`` that stored work of that role in ``window``."""
        pools = self.store.demand.pool_members(window, model).get(model)
        return frozenset() if pools is None else pools[pool]

    def working(
        self,
        model: str,
        pool: str,
        recent: list[DemandMinute],
        members: frozenset[str] | None,
        now: datetime,
    ) -> set[str]:
        """The instances that stored the pool's work in the last five minutes (the observed
        instances when none has a fresh scrape): users' requests for the whole model and the
        decode pool (which stores them), prefill legs for the prefill pool."""
        if pool == PREFILL:
            return set(self.pool_members(model, pool, Window(now - DEMAND_WINDOW, now)))
        served = {i for m in recent for i in m.instances}
        return served if members is None else served & members

    def forecast(self, model: str, policy: ScalingPolicy, now: datetime) -> float | None:
        """The mean over recent weeks of the busiest rate in ``[now, now + lead]`` a week (two,
        …) ago; ``None`` when none of those weeks saw the model."""
        lead = timedelta(seconds=max(policy.lead_time_s, Resolution.MINUTE.seconds))
        peaks: list[float] = []
        for weeks in range(1, min(policy.history_weeks, MAX_HISTORY_WEEKS) + 1):
            start = now - weeks * WEEK
            peak = self.store.demand.peak_rate(model, Window(start, start + lead))
            if peak is not None:
                peaks.append(peak)
        return sum(peaks) / len(peaks) if peaks else None

    def recent_peak(self, model: str, policy: ScalingPolicy, now: datetime) -> float | None:
        """The busiest minute of the last lead time: the forecast of a model that no earlier
        week holds (a new model, a young store — the demo's first hour). It keeps what is
        running sized for what just happened, but cannot see a rebound coming."""
        lead = timedelta(seconds=max(policy.lead_time_s, Resolution.MINUTE.seconds))
        minute_now = Resolution.MINUTE.floor(now)
        return self.store.demand.peak_rate(model, Window(minute_now - lead, minute_now))

    def capacity(
        self,
        model: str,
        specs: list[SloSpec],
        now: datetime,
        pool: str = "",
        members: frozenset[str] | None = None,
    ) -> float | None:
        """Requests per second one instance (of ``pool``) sustains within the latency SLOs
        (cached per model and pool)."""
        key = (model, pool)
        cached = self._capacity.get(key)
        if cached is not None and self.monotonic() - cached[0] < CAPACITY_TTL_S:
            return cached[1]
        ttft, tpot = latency_targets(specs, model)
        if pool == PREFILL:
            rps, source = self._prefill_capacity(model, now, ttft)
        elif pool == DECODE:
            rps, source = self._production(model, now, None, tpot, members)
        else:
            rps, source = self._measure_capacity(model, now, ttft, tpot)
        self._capacity[key] = (self.monotonic(), rps, source)
        return rps

    def capacity_source(self, model: str, pool: str = "") -> str | None:
        cached = self._capacity.get((model, pool))
        return None if cached is None else cached[2]

    def _prefill_capacity(
        self, model: str, now: datetime, ttft: float | None
    ) -> tuple[float | None, str]:
        bound = PREFILL_QUEUE_DEFAULT_S if ttft is None else PREFILL_QUEUE_SHARE * ttft
        best = self.store.demand.busiest_prefill_minute(
            model, Window(now - PRODUCTION_CAPACITY_WINDOW, now), bound
        )
        if best is None:
            return None, "not measured"
        return best.legs_per_s, (
            f"production prefill legs, {best.instance} at {best.minute:%Y-%m-%d %H:%M} "
            f"(mean queue {best.queue_mean_s:.3g} s ≤ {bound:.3g} s)"
        )

    def _production(
        self,
        model: str,
        now: datetime,
        ttft: float | None,
        tpot: float | None,
        instances: frozenset[str] | None = None,
    ) -> tuple[float | None, str]:
        try:
            best = self.store.requests.production_capacity(
                Window(now - PRODUCTION_CAPACITY_WINDOW, now),
                Selector(model=model),
                ttft_p99_max_s=ttft,
                tpot_p99_max_s=tpot,
                instances=instances,
            )
        except InvalidInput:
            return None, "not measured"
        return best.throughput_rps, f"production, {best.phase}"

    def _measure_capacity(
        self, model: str, now: datetime, ttft: float | None, tpot: float | None
    ) -> tuple[float | None, str]:
        for listing in self.store.runs.all():
            if listing.model != model or listing.scenario is not ScenarioKind.STEP:
                continue
            try:
                best = measured_capacity(
                    summarise(self.store.runs.get(listing.id)),
                    ttft_p99_max_s=ttft,
                    tpot_p99_max_s=tpot,
                )
            except (InvalidInput, NotFound):
                continue
            return best.throughput_rps, f"step run {listing.id}, level {best.phase}"
        return self._production(model, now, ttft, tpot)

    def burn_rate(
        self, model: str, specs: list[SloSpec], now: datetime, pool: str = ""
    ) -> float | None:
        """The highest short-window burn rate of the SLOs covering ``model`` that drive
        ``pool`` (``drives``)."""
        rates: list[float] = []
        window = Window(now - self.short_window, now)
        with self.store.reading() as reader:
            for spec in specs:
                if not drives(spec, pool) or spec.selector.model not in (None, model):
                    continue
                selector = dataclasses.replace(spec.selector, model=model)
                counts = reader.events.count(spec.sli, window, selector)
                rates.append(burn_rate(counts, spec.objective))
        return max(rates, default=None)

    def low_load_since(
        self,
        model: str,
        policy: ScalingPolicy,
        observed: int,
        capacity: float | None,
        now: datetime,
    ) -> float | None:
        """Since when every minute's demand would fit ``observed − 1`` instances with the
        headroom (``None``: not low now, or no capacity to tell)."""
        if capacity is None or observed <= 1:
            return None
        fits = capacity * (observed - 1) / (1.0 + policy.headroom)
        minute_now = Resolution.MINUTE.floor(now)
        span = max(timedelta(seconds=2 * policy.scale_in_cooldown_s), timedelta(hours=1))
        start = minute_now - span
        per_minute: Mapping[datetime, int] = {
            m.bucket: m.requests
            for m in self.store.demand.minute_demand(model, Window(start, minute_now))
        }
        since: datetime | None = None
        bucket = minute_now - timedelta(minutes=1)
        while bucket >= start:
            if per_minute.get(bucket, 0) / Resolution.MINUTE.seconds > fits:
                break
            since = bucket
            bucket -= timedelta(minutes=1)
        return None if since is None else _unix(since)


# -- what the API, /metrics and the dashboard show ------------------------------------------


@dataclass(frozen=True, slots=True)
class Current:
    """A model's newest recommendation at ``now``: its age, and why it must not be acted on
    (``refusal``: stale or missing inputs, or the recommendation itself is old), if so."""

    recommendation: Recommendation
    age_s: float
    refusal: str | None

    @property
    def usable(self) -> bool:
        return self.refusal is None

    def to_dict(self) -> dict[str, Any]:
        rec = self.recommendation
        return {
            "model": rec.model,
            "pool": rec.pool,
            "at": datetime.fromtimestamp(rec.at, UTC).isoformat().replace("+00:00", "Z"),
            "observed": rec.observed,
            "desired": rec.desired,
            "predictive": rec.predictive,
            "reactive": rec.reactive,
            "predicted_demand_rps": rec.forecast_rps,
            "driver": rec.driver,
            "reason": rec.reason,
            "stale_inputs": list(rec.stale),
            "staleness_s": round(self.age_s, 3),
            "usable": self.usable,
            "refusal": self.refusal,
        }


#: Inputs without which a recommendation is not served to an autoscaler: the load now.
ESSENTIAL: Final = ("demand_rps",)


def judge(rec: Recommendation, policy: ScalingPolicy, now: datetime) -> Current:
    """``rec`` at ``now``: unusable when an ``ESSENTIAL`` input was stale or missing, when no
    input sized the pool (neither a predictive nor a reactive count: e.g. no capacity measured
    and nothing running hot), or when it is older than the policy's ``stale_after_s`` (the
    recommender has stopped). Other stale or missing inputs (no GPU telemetry, no history for
    a forecast) are listed but do not block it: ``recommend`` never scales in on them."""
    age = max(0.0, _unix(now) - rec.at)
    refusal: str | None = None
    blocking = [name for name in ESSENTIAL if name in rec.stale]
    if blocking:
        refusal = f"stale or missing inputs: {', '.join(blocking)}"
    elif rec.predictive is None and rec.reactive is None:
        refusal = f"no input sized the pool ({', '.join(rec.stale) or 'none'} stale or missing)"
    elif age > policy.stale_after_s:
        refusal = (
            f"the newest recommendation is {age:.0f} s old (stale after {policy.stale_after_s:g} s)"
        )
    return Current(rec, age, refusal)


def current(store: Store, now: datetime) -> list[Current]:
    """Every model's newest recommendations (one per pool of a disaggregated model), judged
    at ``now``, by model then pool. Only the pools of a model's newest cycle are listed: a
    model that became disaggregated (or stopped being) no longer lists its former pools."""
    stored = policies(store)
    latest = store.scaling.latest()
    newest: dict[str, float] = {}
    for rec in latest:
        newest[rec.model] = max(rec.at, newest.get(rec.model, rec.at))
    return [
        judge(rec, choose_policy(stored, rec.model), now)
        for rec in latest
        if rec.at == newest[rec.model]
    ]


def current_for(store: Store, model: str, now: datetime, pool: str | None = None) -> Current:
    """``model``'s newest recommendation judged at ``now``: of ``pool`` for a disaggregated
    model (``InvalidInput`` naming its pools when ``pool`` is missing or not one of them;
    ignored for a model served whole). ``NotFound`` for a model the store does not know (no
    recommendation, no traffic in the last hour, no policy of its own); ``Unavailable`` for a
    known one without a recommendation yet."""
    found = [c for c in current(store, now) if c.recommendation.model == model]
    pools = [c.recommendation.pool for c in found if c.recommendation.pool]
    if pools:
        for each in found:
            if pool and each.recommendation.pool == pool:
                return each
        asked = "names no pool" if not pool else f"names pool {pool!r}"
        raise InvalidInput(
            f"{model!r} is served disaggregated and the request {asked}: "
            f"ask for one of its pools, pool={' or pool='.join(pools)}",
            details={"model": model, "pool": pool, "pools": pools},
        )
    if found:
        return found[0]
    known = model in store.demand.models_seen(Window(now - MODELS_WINDOW, now))
    known = known or any(p.model == model for p in policies(store))
    if not known:
        raise NotFound(
            f"no model named {model!r} is served or has a scaling policy", details={"model": model}
        )
    raise Unavailable(f"no replica recommendation for {model!r} yet", details={"model": model})


def history(
    store: Store, model: str, start: datetime, end: datetime, pool: str = ""
) -> list[Recommendation]:
    """``model``'s recommendations (of ``pool``: ``""`` for a model served whole) made from
    ``start`` to ``end``, oldest first: what the Scaling page charts."""
    return store.scaling.history(model, start, end, pool)


# -- a recorded day, for a backtest ------------------------------------------------------------


def recorded_demand(store: Store, model: str, day: date, weeks: int) -> RecordedDemand:
    """``model``'s requests per minute on ``day`` and on the same weekday of the ``weeks``
    weeks before it (``scaling backtest --from-store``); ``NotFound`` when ``day`` had none."""
    return store.demand.recorded_demand(model, day, weeks)


def busiest_models(store: Store, day: date) -> list[str]:
    """The models with requests on ``day``, busiest first."""
    return list(store.demand.busiest_models(day))
