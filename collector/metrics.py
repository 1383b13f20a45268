"""The collector's own Prometheus metrics, in a registry of its own (never the global one),
so that every refusal and skip is visible on the sidecar's ``GET /metrics``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

_P = "infersight_collector_"


class CollectorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.exports = Counter(
            _P + "exports",
            "OTLP export requests by transport and result",
            ["transport", "result"],
            registry=r,
        )
        self.spans_received = Counter(_P + "spans_received", "Spans received", registry=r)
        self.spans_accepted = Counter(
            _P + "spans_accepted", "Spans durably spooled and acknowledged", registry=r
        )
        self.spans_rejected = Counter(
            _P + "spans_rejected", "Spans refused, by reason", ["reason"], registry=r
        )
        self.spans_unmapped = Counter(
            _P + "spans_unmapped",
            "Spans that are not requests or stages, by engine and reason",
            ["engine", "reason"],
            registry=r,
        )
        self.attributes_dropped = Counter(
            _P + "attributes_dropped", "Span attributes over the size limit", registry=r
        )
        self.spool_records = Gauge(_P + "spool_records", "Entries held in the spool", registry=r)
        self.spool_bytes = Gauge(_P + "spool_bytes", "Bytes held in the spool", registry=r)
        self.ship_lag = Gauge(
            _P + "ship_lag_seconds",
            "How long the oldest entry has been eligible and not shipped (samples: beyond "
            "the interval they are batched for)",
            registry=r,
        )
        self.ship_failing_since = Gauge(
            _P + "ship_failing_since_timestamp_seconds",
            "Unix time shipping began failing, for as long as it fails (0: shipping works)",
            registry=r,
        )
        self.ship_last_success = Gauge(
            _P + "ship_last_success_timestamp_seconds",
            "Unix time of the last shipping pass that succeeded (0: none yet)",
            registry=r,
        )
        self.shipped = Counter(_P + "shipped", "Entries stored, by kind", ["kind"], registry=r)
        self.ship_duplicates = Counter(
            _P + "ship_duplicates", "Records the store already had (replays)", registry=r
        )
        self.ship_errors = Counter(
            _P + "ship_errors", "Failed shipping attempts, by reason", ["reason"], registry=r
        )
        self.orphan_stages = Counter(
            _P + "orphan_stages", "Stage spans whose request never arrived in time", registry=r
        )
        self.scrapes = Counter(_P + "scrapes", "Scrapes of the server /metrics", registry=r)
        self.scrape_errors = Counter(
            _P + "scrape_errors", "Failed scrapes, by reason", ["reason"], registry=r
        )
        self.gpu_samples = Counter(_P + "gpu_samples", "GPU samples taken", registry=r)
        self.gpu_errors = Counter(
            _P + "gpu_errors", "Failed GPU reads, by reason", ["reason"], registry=r
        )
        self.xid_events = Counter(_P + "xid_events", "NVML XID events seen", ["xid"], registry=r)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (0 when absent); for /healthz and tests."""
        found = self.registry.get_sample_value(name, labels)
        return 0.0 if found is None else found
