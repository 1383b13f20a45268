"""``/metrics``' who-spent-it families (``api.metrics`` registers ``AttributionCollector``):
the last hour's cost per tenant, team and workload split three ways, with goodput, bounded by
the top N values of each dimension plus ``(other)`` and the unattributed requests (``""``):

* ``infersight_attributed_cost_last_hour{dimension,value,split,currency}`` — ``split``:
  ``usage`` (the GPU time its requests used), ``idle`` (its share of idle time) and
  ``allocation`` (usage + idle: its share of the whole cost); over the values of one dimension
  the allocations add up to the fleet's last hour (``service.attribution``)
* ``infersight_attributed_requests_last_hour{dimension,value}`` and
  ``infersight_attributed_good_tokens_last_hour{dimension,value}`` — requests, and tokens of
  successful requests within their SLOs
* ``infersight_attribution_top_n{dimension}`` — the N (``INFERSIGHT_ATTRIBUTION_TOP_N``) and
  ``infersight_attribution_folded_values{dimension}`` — how many values ``(other)`` stands for

One cost read per scrape (grouped by the three dimensions, regrouped here); the registry's
cache (``metrics_cache_s``) shares it between scrapers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from infersight.core.attribution import GROUPING_DIMENSIONS
from infersight.core.cost import CostModel, group_lines
from infersight.core.window import Window
from infersight.service.attribution import attributed_from
from infersight.service.evaluation import FinestFor
from infersight.storage.seam import Store

WINDOW: Final = timedelta(hours=1)
_DIMENSION: Final = ["dimension"]


class AttributionCollector(Collector):
    """The families of the module's doc, over the last hour."""

    def __init__(
        self,
        store: Store,
        model: Callable[[], CostModel],
        clock: Callable[[], datetime],
        finest_for: FinestFor,
        top_n: int,
    ) -> None:
        self.store = store
        self.model = model
        self.clock = clock
        self.finest_for = finest_for
        self.top_n = top_n

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self.clock()
        window = Window.last(WINDOW, now)
        result = self.store.cost.cost(
            window,
            self.model(),
            group_by=GROUPING_DIMENSIONS,
            finest=self.finest_for(window, now),
        )
        cost = GaugeMetricFamily(
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
            labels=_DIMENSION,
        )
        folded = GaugeMetricFamily(
            "infersight_attribution_folded_values",
            "Values of each dimension folded into (other) over the last hour.",
            labels=_DIMENSION,
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
                    cost.add_metric([dimension, share.value, split, answer.currency], float(amount))
                requests.add_metric([dimension, share.value], share.line.requests)
                good.add_metric([dimension, share.value], share.line.good_tokens)
            top.add_metric([dimension], answer.top.top_n)
            folded.add_metric([dimension], answer.top.folded)
        yield from (cost, requests, good, top, folded)
