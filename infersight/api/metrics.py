"""``/metrics``: SLO and latency gauges for Prometheus, in the app's own ``CollectorRegistry``.

Values are computed at scrape time from the store, so every replica answers the same:

* ``infersight_slo_sli_ratio{slo,sli,scope}`` — share of good events over the SLO window
* ``infersight_slo_objective_ratio{slo}`` — the objective
* ``infersight_slo_error_budget_remaining_ratio{slo}`` — unspent share of the budget, 0..1
* ``infersight_slo_burn_rate{slo,window}`` — burn rate per policy window (5m … 3d)
* ``infersight_slo_events{slo}`` — events over the SLO window
* ``infersight_slo_window_events{slo,window}`` and ``infersight_slo_window_bad_events{slo,window}``
  — events and bad events per policy window: what ``infersight slo export-rules``'s
  Prometheus rules compute burn rates from
* ``infersight_latency_seconds{metric,model,quantile}`` — TTFT / TPOT / E2E quantiles per model
  over the last five minutes (exact or sketch, as the latency route decides)
* ``infersight_cost_last_hour{model,currency}``, ``infersight_cost_per_million_tokens{model,
  currency,kind}`` (kind total, input, output, good), ``infersight_tokens_per_joule{model}``,
  ``infersight_idle_cost_last_hour{instance,currency}`` and
  ``infersight_gpu_utilisation_ratio{instance}`` — unit economics of the last hour
  (``CostCollector``)
* ``infersight_attributed_cost_last_hour{dimension,value,split,currency}`` and the other
  who-spent-it families: cost per tenant, team and workload split into usage, idle and
  allocation, with requests and good tokens, the top N values apart
  (``AttributionCollector``)
* ``infersight_desired_replicas{model,pool}`` and ``infersight_observed_replicas{model,pool}``
  — the replica recommender's newest usable recommendation per model and pool (``pool``:
  ``prefill`` / ``decode`` for a disaggregated model, "" otherwise; a stale one, or one made
  with stale or missing inputs, is left out: an HPA then holds rather than scaling on it), with
  ``infersight_scaling_recommendation_age_seconds{model,pool}`` for every one, and
  ``infersight_scaling_keda_refusals_total{reason}`` — answers the KEDA endpoint refused
  (``ScalingCollector``)
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

from fastapi import Depends, FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from infersight.api.auth import Scope
from infersight.api.context import AppContext, Refusals
from infersight.api.deps import requires
from infersight.core.attribution import GROUPING_DIMENSIONS
from infersight.core.burn import Policy
from infersight.core.cost import CostModel, CostResult, group_lines
from infersight.core.quantiles import quantile_key
from infersight.core.query import Method, Selector
from infersight.core.window import Window, format_duration
from infersight.service import telemetry
from infersight.service.attribution import attributed_from
from infersight.service.cost_view import cost
from infersight.service.evaluation import FinestFor
from infersight.service.scaling import current as current_scaling
from infersight.service.slos import statuses

if TYPE_CHECKING:
    from infersight.service.store import Store

log = logging.getLogger(__name__)
LATENCY_WINDOW: Final = timedelta(minutes=5)
COST_WINDOW: Final = timedelta(hours=1)
LATENCY_METRICS: Final = ("ttft", "tpot", "e2e")
LATENCY_QUANTILES: Final = (0.5, 0.9, 0.95, 0.99)
#: Server figures exported per instance (``storage.server_engines.SERVER_FIGURES``).
ENGINE_GAUGES: Final = {
    "prefix_cache_hit_ratio": "Prefix-cache hits over queries per scrape interval, last 5 min.",
    "spec_acceptance_rate": "Speculative decoding: accepted over draft tokens, last 5 minutes.",
    "spec_accept_length": "Speculative decoding: tokens per verification step, last 5 minutes.",
    "requests_deferred": "Requests held while their KV cache arrives (P/D decode side).",
}


class StoreCollector(Collector):
    def __init__(
        self,
        store: Store,
        policy: Policy,
        clock: Callable[[], datetime],
        finest_for: FinestFor,
        exact_max_rows: int,
    ) -> None:
        self.store = store
        self.policy = policy
        self.clock = clock
        self.finest_for = finest_for
        self.exact_max_rows = exact_max_rows

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self.clock()
        yield from self._slos(now)
        yield self._latency(now)
        yield from self._engines(now)

    def _engines(self, now: datetime) -> Iterator[GaugeMetricFamily]:
        """Each server's counter-derived figures over the last 5 minutes (absent where the
        server did not report them: an engine that does not speculate)."""
        families = {
            name: GaugeMetricFamily(f"infersight_engine_{name}", doc, labels=["instance"])
            for name, doc in ENGINE_GAUGES.items()
        }
        window = Window.last(LATENCY_WINDOW, now)
        for server in telemetry.server_summaries(self.store, window):
            for name, family in families.items():
                value = server.figures.get(name)
                if value is not None:
                    family.add_metric([server.instance], value)
        yield from families.values()

    def _slos(self, now: datetime) -> Iterator[GaugeMetricFamily]:
        sli = GaugeMetricFamily(
            "infersight_slo_sli_ratio",
            "Share of good events over the SLO window.",
            labels=["slo", "sli", "scope"],
        )
        objective = GaugeMetricFamily(
            "infersight_slo_objective_ratio", "The SLO's objective.", labels=["slo"]
        )
        budget = GaugeMetricFamily(
            "infersight_slo_error_budget_remaining_ratio",
            "Share of the SLO window's error budget not yet spent (0..1).",
            labels=["slo"],
        )
        burn = GaugeMetricFamily(
            "infersight_slo_burn_rate",
            "Bad-event share over the window divided by the error budget.",
            labels=["slo", "window"],
        )
        events = GaugeMetricFamily(
            "infersight_slo_events", "Events counted over the SLO window.", labels=["slo"]
        )
        window_events = GaugeMetricFamily(
            "infersight_slo_window_events",
            "Events counted over each burn-rate policy window.",
            labels=["slo", "window"],
        )
        window_bad = GaugeMetricFamily(
            "infersight_slo_window_bad_events",
            "Bad events (failed, slower than the threshold, or for goodput: any target missed) "
            "over each policy window (requests, or output tokens for a per-token goodput SLO).",
            labels=["slo", "window"],
        )
        for current in statuses(self.store, self.policy, now, self.finest_for):
            spec = current.spec
            if current.sli is not None:
                sli.add_metric([spec.name, spec.sli.kind.value, spec.scope], current.sli)
            objective.add_metric([spec.name], spec.objective)
            budget.add_metric([spec.name], current.budget_remaining)
            events.add_metric([spec.name], current.counts.total)
            for window, rate in current.burn_rates().items():
                burn.add_metric([spec.name, window], rate)
            for span, counts in current.evaluation.counts.items():
                window_events.add_metric([spec.name, format_duration(span)], counts.total)
                window_bad.add_metric([spec.name, format_duration(span)], counts.bad)
        yield from (sli, objective, budget, burn, events, window_events, window_bad)

    def _latency(self, now: datetime) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "infersight_latency_seconds",
            "Request latency quantiles per model over the last 5 minutes.",
            labels=["metric", "model", "quantile"],
        )
        window = Window.last(LATENCY_WINDOW, now)
        for metric in LATENCY_METRICS:
            result = telemetry.latency(
                self.store,
                metric,
                window,
                Selector(),
                ("model",),
                LATENCY_QUANTILES,
                Method.AUTO,
                finest=self.finest_for(window, now),
                exact_max_rows=self.exact_max_rows,
            )
            for group in result.groups:
                for q, value in group.quantiles.items():
                    family.add_metric([metric, group.labels["model"], quantile_key(q)], value)
        return family


class _LastHourCost(Collector):
    """A collector of gauges over the last hour's cost (``COST_WINDOW``), priced by the cost
    model ``model()`` returns."""

    def __init__(
        self,
        store: Store,
        model: Callable[[], CostModel],
        clock: Callable[[], datetime],
        finest_for: FinestFor,
    ) -> None:
        self.store = store
        self.model = model
        self.clock = clock
        self.finest_for = finest_for

    def last_hour(self, group_by: tuple[str, ...]) -> CostResult:
        """The last hour's cost per group of ``group_by``."""
        now = self.clock()
        window = Window.last(COST_WINDOW, now)
        return cost(
            self.store,
            window,
            self.model(),
            group_by=group_by,
            finest=self.finest_for(window, now),
        )


class CostCollector(_LastHourCost):
    """Cost gauges over the last hour, per model and per instance."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        result = self.last_hour(("model",))
        cur = result.currency
        spent = GaugeMetricFamily(
            "infersight_cost_last_hour",
            "Cost attributed to each model over the last hour.",
            labels=["model", "currency"],
        )
        per_million = GaugeMetricFamily(
            "infersight_cost_per_million_tokens",
            "Cost per million tokens over the last hour (kind: total, input, output, good).",
            labels=["model", "currency", "kind"],
        )
        per_joule = GaugeMetricFamily(
            "infersight_tokens_per_joule",
            "Tokens served per joule of measured GPU energy over the last hour.",
            labels=["model"],
        )
        for line in result.groups:
            model = line.labels["model"]
            spent.add_metric([model, cur], float(line.cost))
            for kind, value in (
                ("total", line.cost_per_million_tokens),
                ("input", line.cost_per_million_input_tokens),
                ("output", line.cost_per_million_output_tokens),
                ("good", line.cost_per_million_good_tokens),
            ):
                if value is not None:
                    per_million.add_metric([model, cur, kind], float(value.amount))
            if line.tokens_per_joule is not None:
                per_joule.add_metric([model], line.tokens_per_joule)
        idle = GaugeMetricFamily(
            "infersight_idle_cost_last_hour",
            "Cost of idle GPU time (under the utilisation floor, or no work) over the last hour.",
            labels=["instance", "currency"],
        )
        util = GaugeMetricFamily(
            "infersight_gpu_utilisation_ratio",
            "Time-weighted mean GPU utilisation over the last hour.",
            labels=["instance"],
        )
        for instance in result.instances:
            idle.add_metric([instance.instance, cur], float(instance.idle_cost.amount))
            if instance.utilisation is not None:
                util.add_metric([instance.instance], instance.utilisation)
        yield from (spent, per_million, per_joule, idle, util)


class AttributionCollector(_LastHourCost):
    """The last hour's cost per tenant, team and workload split three ways, with goodput,
    bounded by the top N values of each dimension plus ``(other)`` and the unattributed
    requests (``""``):

    * ``infersight_attributed_cost_last_hour{dimension,value,split,currency}`` — ``split``:
      ``usage`` (the GPU time its requests used), ``idle`` (its share of idle time) and
      ``allocation`` (usage + idle: its share of the whole cost); over the values of one
      dimension the allocations add up to the fleet's last hour (``service.attribution``)
    * ``infersight_attributed_requests_last_hour{dimension,value}`` and
      ``infersight_attributed_good_tokens_last_hour{dimension,value}`` — requests, and tokens
      of successful requests within their SLOs
    * ``infersight_attribution_top_n{dimension}`` — the N (``INFERSIGHT_ATTRIBUTION_TOP_N``)
      and ``infersight_attribution_folded_values{dimension}`` — how many values ``(other)``
      stands for

    One cost read per scrape (grouped by the three dimensions, regrouped here); the registry's
    cache (``metrics_cache_s``) shares it between scrapers."""

    def __init__(
        self,
        store: Store,
        model: Callable[[], CostModel],
        clock: Callable[[], datetime],
        finest_for: FinestFor,
        top_n: int,
    ) -> None:
        super().__init__(store, model, clock, finest_for)
        self.top_n = top_n

    def collect(self) -> Iterator[GaugeMetricFamily]:
        result = self.last_hour(GROUPING_DIMENSIONS)
        costs = GaugeMetricFamily(
            "infersight_attributed_cost_last_hour",
            "Cost of the last hour per tenant, team or workload (top N and (other)): "
            "split usage, idle or allocation (= usage + idle).",
            labels=["dimension", "value", "split", "currency"],
        )
        requests = GaugeMetricFamily(
            "infersight_attributed_requests_last_hour",
            "Requests of the last hour per tenant, team or workload (top N and (other)).",
            labels=["dimension", "value"],
        )
        good = GaugeMetricFamily(
            "infersight_attributed_good_tokens_last_hour",
            "Good tokens (successful requests within their SLOs) of the last hour per tenant, "
            "team or workload (top N and (other)).",
            labels=["dimension", "value"],
        )
        top = GaugeMetricFamily(
            "infersight_attribution_top_n",
            "How many values of each dimension the attributed families keep apart.",
            labels=["dimension"],
        )
        folded = GaugeMetricFamily(
            "infersight_attribution_folded_values",
            "Values of each dimension folded into (other) over the last hour.",
            labels=["dimension"],
        )
        for dimension in GROUPING_DIMENSIONS:
            lines, total = group_lines(result.groups, (dimension,), result.currency)
            one = dataclasses.replace(
                result, group_by=(dimension,), groups=tuple(lines), total=total
            )
            answer = attributed_from(one, self.top_n)
            for share in answer.shares:
                for split, amount in (
                    ("usage", share.usage),
                    ("idle", share.idle),
                    ("allocation", share.allocation),
                ):
                    costs.add_metric(
                        [dimension, share.value, split, answer.currency], float(amount)
                    )
                requests.add_metric([dimension, share.value], share.line.requests)
                good.add_metric([dimension, share.value], share.line.good_tokens)
            top.add_metric([dimension], answer.top.top_n)
            folded.add_metric([dimension], answer.top.folded)
        yield from (costs, requests, good, top, folded)


class ScalingCollector(Collector):
    """The replica recommender's newest recommendation per model, and the KEDA refusals."""

    def __init__(self, store: Store, clock: Callable[[], datetime], refusals: Refusals) -> None:
        self.store = store
        self.clock = clock
        self.refusals = refusals

    def collect(self) -> Iterator[Metric]:
        desired = GaugeMetricFamily(
            "infersight_desired_replicas",
            "Instances the replica recommender wants for the model (usable recommendations "
            "only; use as an HPA/KEDA Value target).",
            labels=["model", "pool"],
        )
        observed = GaugeMetricFamily(
            "infersight_observed_replicas",
            "Instances serving the model when the recommendation was made.",
            labels=["model", "pool"],
        )
        age = GaugeMetricFamily(
            "infersight_scaling_recommendation_age_seconds",
            "Age of the model's newest replica recommendation.",
            labels=["model", "pool"],
        )
        for found in current_scaling(self.store, self.clock()):
            key = [found.recommendation.model, found.recommendation.pool]
            age.add_metric(key, found.age_s)
            if found.usable:
                desired.add_metric(key, found.recommendation.desired)
                observed.add_metric(key, found.recommendation.observed)
        refused = CounterMetricFamily(
            "infersight_scaling_keda_refusals",
            "KEDA metrics-api answers refused (503/404) instead of a number, by reason.",
            labels=["reason"],
        )
        for reason, count in sorted(self.refusals.counts().items()):
            refused.add_metric([reason], count)
        yield from (desired, observed, age, refused)


class Cached(Collector):
    """``inner``'s families, reused for ``ttl_s`` seconds.

    The gauges are computed from the store at scrape time (every SLO's status, the last
    hour's cost): on a large store that takes a good part of a second. Several Prometheus
    servers, or a dashboard next to them, then share one computation per ``ttl_s``, and
    concurrent scrapes wait for the one in flight instead of starting their own.
    """

    def __init__(
        self, inner: Collector, ttl_s: float, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.inner = inner
        self.ttl_s = ttl_s
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._families: list[Metric] = []
        self._expires = -math.inf

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if self.ttl_s <= 0 or self.monotonic() >= self._expires:
                self._families = list(self.inner.collect())
                self._expires = self.monotonic() + self.ttl_s
            return iter(self._families)


def registry_for(
    *collectors: Collector, ttl_s: float = 0.0, monotonic: Callable[[], float] = time.monotonic
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(Cached(collector, ttl_s, monotonic) if ttl_s > 0 else collector)
    return registry


def install(app: FastAPI, context: AppContext) -> None:
    """Serve ``/metrics`` (read scope, left out of the OpenAPI document) from the app's own
    registry."""
    finest_for = context.retention.finest_for
    registry = registry_for(
        StoreCollector(
            context.store, context.policy, context.clock, finest_for, context.exact_max_rows
        ),
        CostCollector(context.store, context.cost_model, context.clock, finest_for),
        AttributionCollector(
            context.store,
            context.cost_model,
            context.clock,
            finest_for,
            context.settings.attribution_top_n,
        ),
        ttl_s=context.settings.metrics_cache_s,
    )
    # Not cached: KEDA refusals should show at once, and the read is one small query.
    registry.register(ScalingCollector(context.store, context.clock, context.keda_refusals))

    @app.get("/metrics", dependencies=[Depends(requires(Scope.READ))], include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
