"""The collector's own Prometheus metrics, in a registry of its own (never the global one),
so that every refusal and skip is visible on the sidecar's ``GET /metrics``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from infersight.collector.assembly import Refusal
from infersight.collector.engines import DIALECT_NAMES

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
        self.bodies_refused = Counter(
            _P + "bodies_refused",
            "Export bodies refused, by transport and reason (too_many_spans, too_deep, busy...)",
            ["transport", "reason"],
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
        self.sequences_merged = Counter(
            _P + "sequences_merged",
            "Sequence spans of parallel-sampling requests (n > 1: one span per sequence, one "
            "gen_ai.request.id) folded into their request's one record",
            registry=r,
        )
        self.disaggregated = Counter(
            _P + "disaggregated_requests",
            "Decode instances' records made one user request with their P/D proxy's spans "
            "(llm-d routing sidecar: the request, its prefill leg and its decode leg)",
            registry=r,
        )
        self.ship_duplicates = Counter(
            _P + "ship_duplicates", "Records the store already had (replays)", registry=r
        )
        self.ship_errors = Counter(
            _P + "ship_errors", "Failed shipping attempts, by reason", ["reason"], registry=r
        )
        self.fragments_refused = Counter(
            _P + "fragments_refused",
            "Stage spans that belong to no request of their trace, by reason: not_descendant "
            "(not below a request span: a client's or a sibling's span), ancestor (above a "
            "request span), other_service (another service's span)",
            ["reason"],
            registry=r,
        )
        for reason in Refusal:  # exported at 0 from the start, so that rates can be taken
            self.fragments_refused.labels(reason.value)
        self.orphan_stages = Counter(
            _P + "orphan_stages",
            "Stage spans that expired unsettled: their request, or a span on the way up to it, "
            "never arrived in time",
            registry=r,
        )
        self.scrapes = Counter(_P + "scrapes", "Scrapes of the server /metrics", registry=r)
        self.scrape_errors = Counter(
            _P + "scrape_errors", "Failed scrapes, by reason", ["reason"], registry=r
        )
        self.scrape_dialect = Gauge(
            _P + "scrape_dialect",
            "1 for the /metrics dialect the sampler recognised at its last scrape ("
            + ", ".join(DIALECT_NAMES)
            + ")",
            ["sampler", "dialect"],
            registry=r,
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
