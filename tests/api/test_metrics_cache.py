"""``/metrics`` gauges computed from the store are shared by scrapes within the cache TTL."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily

from infersight.api.metrics import registry_for


class Counting:
    """A collector whose gauge says how many times it was computed."""

    def __init__(self) -> None:
        self.calls = 0

    def collect(self):
        self.calls += 1
        family = GaugeMetricFamily("computed_times", "How often the store was read.")
        family.add_metric([], self.calls)
        yield family


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_scrapes_within_the_ttl_reuse_one_computation_and_later_ones_recompute():
    clock = Clock()
    inner = Counting()
    registry = registry_for(inner, ttl_s=10.0, monotonic=clock)
    first = generate_latest(registry)
    clock.now += 9.9
    assert generate_latest(registry) == first
    assert inner.calls == 1
    clock.now += 0.2
    assert b"computed_times 2.0" in generate_latest(registry)
    assert inner.calls == 2


def test_a_zero_ttl_computes_on_every_scrape():
    inner = Counting()
    registry = registry_for(inner, ttl_s=0.0)
    generate_latest(registry)
    generate_latest(registry)
    assert inner.calls == 2
