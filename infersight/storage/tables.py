"""The one ``MetaData`` of infersight and every table in it.

Raw tables (``requests``, ``gpu_samples``, ``server_samples``, ``server_engine_samples``) are
range-partitioned by day on PostgreSQL; their primary keys therefore lead with the time column
(a partitioned table's unique keys must contain the partition key). That keeps writes
idempotent: a replayed span carries the same start time, trace id and span id, so it meets its
earlier copy in the same partition.

``request_rollups`` holds one row per series (model, instance, tenant, priority) per bucket at
three resolutions (1m, 1h, 1d): counts, token sums and one serialised ``QuantileSketch`` per
latency metric. It is small and not partitioned; retention deletes by resolution and age.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from infersight.core.gpu_intervals import GPU_ROLLUP_MEANS, GPU_ROLLUP_REASONS, GPU_UTIL_BINS
from infersight.core.records import DURATION_FIELDS, GROUP_LABELS
from infersight.core.samples import SERVER_METRIC_FIELDS
from infersight.storage.types import UTCDateTime

NAMING: Final = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=NAMING)

LABEL = String(256)
#: Tables partitioned by day on PostgreSQL, with their time column.
PARTITIONED: Final = {
    "requests": "start",
    "gpu_samples": "ts",
    "server_samples": "ts",
    "server_engine_samples": "ts",
    "client_requests": "start",
    "request_parts": "start",
    "trace_attributions": "start",
}


def _request_columns() -> list[Column[Any]]:
    """The columns of a request record (``core.records.RequestRecord``), one per field."""
    return [
        Column("start", UTCDateTime(), nullable=False),
        Column("trace_id", String(32), nullable=False),
        Column("span_id", String(16), nullable=False),
        Column("instance", LABEL, nullable=False),
        Column("service", LABEL, nullable=False, server_default=""),
        Column("engine", String(16), nullable=False, server_default="generic"),
        *(
            Column(name, LABEL, nullable=False, server_default="")
            for name in ("model", "tenant", "priority", "operation")
        ),
        *(Column(name, Float(53), nullable=True) for name in DURATION_FIELDS),
        Column("input_tokens", Integer, nullable=True),
        Column("output_tokens", Integer, nullable=True),
        Column("cached_tokens", Integer, nullable=True),
        Column("status", String(8), nullable=False, server_default="ok"),
        Column("error_type", LABEL, nullable=False, server_default=""),
        Column("finish_reason", LABEL, nullable=False, server_default=""),
        Column("adapter", LABEL, nullable=False, server_default=""),
        Column("role", String(8), nullable=False, server_default=""),
        Column("peer", LABEL, nullable=False, server_default=""),
        # Who the request was for besides its tenant, from its trace's attribution
        # (revision 0022, issue 34): set by the store, never by a sidecar.
        Column("team", LABEL, nullable=False, server_default=""),
        Column("workload", LABEL, nullable=False, server_default=""),
    ]


#: One row per user request (a disaggregated one once, on its decode side).
requests = Table(
    "requests",
    metadata,
    *_request_columns(),
    # Raw rows are always read by time range (partition-pruned on PostgreSQL, then this key);
    # long windows are served from rollups, so label indexes would only slow ingest down.
    PrimaryKeyConstraint("start", "trace_id", "span_id"),
    postgresql_partition_by="RANGE (start)",
)

#: The prefill legs of disaggregated requests (``Role.PREFILL``): the prefill pool's own view
#: of its work (its queue, its prefill, the prompt tokens it computed), kept apart so that no
#: request or token is counted twice; joined to the user's request by trace id. Partitioned,
#: kept and keyed like ``requests``; never rolled up.
request_parts = Table(
    "request_parts",
    metadata,
    *_request_columns(),
    PrimaryKeyConstraint("start", "trace_id", "span_id"),
    postgresql_partition_by="RANGE (start)",
)

#: Parallel sampling: the sequences folded into a request after it was stored (a sibling
#: that came after the sidecar's reassembly window; ``core.sequences``), one row per
#: sequence span, naming the stored request (``request_span_id``, its ``start``). The key
#: makes the fold exactly-once: a sequence shipped again (a retry, a replay after a crash)
#: is found here and not added twice. Few rows (late sequences only); kept as long as their
#: request (``start``).
request_sequences = Table(
    "request_sequences",
    metadata,
    Column("trace_id", String(32), nullable=False),
    Column("span_id", String(16), nullable=False),
    Column("request_span_id", String(16), nullable=False),
    Column("start", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("trace_id", "span_id"),
    Index("ix_request_sequences_start", "start"),
)

#: One row per call a client's GenAI instrumentation traced (``core.client.ClientRecord``):
#: the caller's end to end time and TTFT, never merged into ``requests``; joined to the server's
#: record by trace id when read (``storage.client_reads``). Partitioned and kept like
#: ``requests``, and keyed the same way, so a replayed span is stored once.
client_requests = Table(
    "client_requests",
    metadata,
    Column("start", UTCDateTime(), nullable=False),
    Column("trace_id", String(32), nullable=False),
    Column("span_id", String(16), nullable=False),
    *(
        Column(name, LABEL, nullable=False, server_default="")
        for name in ("service", "source", "provider", "model", "tenant", "operation")
    ),
    Column("e2e_s", Float(53), nullable=True),
    Column("ttft_s", Float(53), nullable=True),
    Column("ttft_source", String(16), nullable=False, server_default=""),
    Column("input_tokens", Integer, nullable=True),
    Column("output_tokens", Integer, nullable=True),
    Column("status", String(8), nullable=False, server_default="ok"),
    Column("error_type", LABEL, nullable=False, server_default=""),
    PrimaryKeyConstraint("start", "trace_id", "span_id"),
    postgresql_partition_by="RANGE (start)",
)

#: Who a trace's requests were for, as its gateway's or client's spans named it
#: (``core.attribution.Attribution``, issue 34): one row per such span, keyed like a record
#: so a replayed span is stored once. The store fills the requests of the trace from it
#: (``storage.attribution``), whichever of the two arrives first. Partitioned by day and kept
#: like ``requests``; read by trace id (its index) within a few days of a request's start.
trace_attributions = Table(
    "trace_attributions",
    metadata,
    Column("start", UTCDateTime(), nullable=False),
    Column("trace_id", String(32), nullable=False),
    Column("span_id", String(16), nullable=False),
    Column("duration_s", Float(53), nullable=False, server_default="0"),
    *(
        Column(name, LABEL, nullable=False, server_default="")
        for name in ("tenant", "team", "workload", "adapter")
    ),
    Column("source", String(64), nullable=False, server_default=""),
    PrimaryKeyConstraint("start", "trace_id", "span_id"),
    Index("ix_trace_attributions_trace_id", "trace_id"),
    postgresql_partition_by="RANGE (start)",
)

#: The latency metrics a rollup row keeps a sketch for: column name → record field.
SKETCH_COLUMNS: Final = {f"{name.removesuffix('_s')}_sketch": name for name in DURATION_FIELDS}

request_rollups = Table(
    "request_rollups",
    metadata,
    Column("resolution", String(2), nullable=False),
    Column("bucket", UTCDateTime(), nullable=False),
    *(Column(name, LABEL, nullable=False) for name in GROUP_LABELS),
    Column("requests", BigInteger, nullable=False),
    Column("errors", BigInteger, nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("cached_tokens", BigInteger, nullable=False),
    *(Column(name, LargeBinary, nullable=True) for name in SKETCH_COLUMNS),
    PrimaryKeyConstraint("resolution", "bucket", *GROUP_LABELS),
)

gpu_samples = Table(
    "gpu_samples",
    metadata,
    Column("ts", UTCDateTime(), nullable=False),
    Column("instance", LABEL, nullable=False),
    Column("gpu_index", SmallInteger, nullable=False),
    Column("uuid", LABEL, nullable=False, server_default=""),
    Column("name", LABEL, nullable=False, server_default=""),
    *(
        Column(name, Float(53), nullable=True)
        for name in (
            "util_gpu",
            "util_memory",
            "memory_used_bytes",
            "memory_total_bytes",
            "power_w",
            "power_limit_w",
            "energy_j",
            "temperature_c",
            "sm_clock_mhz",
            "memory_clock_mhz",
        )
    ),
    Column("throttle_reasons", String(512), nullable=False, server_default=""),
    Column("ecc_sbe_total", Float(53), nullable=True),
    Column("ecc_dbe_total", Float(53), nullable=True),
    Column("xid_last", Integer, nullable=True),
    Column("sm_occupancy", Float(53), nullable=True),
    Column("dram_bw_util", Float(53), nullable=True),
    Column("tensor_util", Float(53), nullable=True),
    # A MIG slice or time-sliced share (``core.gpu_slice``; revision 0021, issue 34).
    Column("gpu_slice", String(64), nullable=False, server_default=""),
    Column("parent_uuid", LABEL, nullable=False, server_default=""),
    Column("gpu_instance_id", Integer, nullable=True),
    PrimaryKeyConstraint("ts", "instance", "gpu_index"),
    Index("ix_gpu_samples_instance_ts", "instance", "ts"),
    postgresql_partition_by="RANGE (ts)",
)

#: One row per scrape of a server: the instance's figures (``core.samples.combine_engines``:
#: counts summed over data-parallel engines, ratios their mean, ``kv_cache_usage_max`` the
#: hottest engine's; NULL on rows stored before revision 0008).
server_samples = Table(
    "server_samples",
    metadata,
    Column("ts", UTCDateTime(), nullable=False),
    Column("instance", LABEL, nullable=False),
    Column("engine", String(16), nullable=False, server_default="generic"),
    Column("model", LABEL, nullable=False, server_default=""),
    *(Column(name, Float(53), nullable=True) for name in SERVER_METRIC_FIELDS),
    Column("kv_cache_usage_max", Float(53), nullable=True),
    PrimaryKeyConstraint("ts", "instance"),
    Index("ix_server_samples_instance_ts", "instance", "ts"),
    postgresql_partition_by="RANGE (ts)",
)

#: One row per data-parallel engine of a scrape whose server runs two or more (vLLM's
#: ``engine`` label, SGLang's ``dp_rank``), next to the instance's row in ``server_samples``.
server_engine_samples = Table(
    "server_engine_samples",
    metadata,
    Column("ts", UTCDateTime(), nullable=False),
    Column("instance", LABEL, nullable=False),
    Column("rank", String(64), nullable=False),
    *(Column(name, Float(53), nullable=True) for name in SERVER_METRIC_FIELDS),
    PrimaryKeyConstraint("ts", "instance", "rank"),
    Index("ix_server_engine_samples_instance_ts", "instance", "ts"),
    postgresql_partition_by="RANGE (ts)",
)

# -- SLOs and incidents (issue 5) -----------------------------------------------------------

#: One row per SLO; ``spec`` is the definition as JSON (see ``storage.slo_store``).
slos = Table(
    "slos",
    metadata,
    Column("name", String(128), nullable=False),
    Column("spec", Text, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("name"),
)

#: One row per alert of an SLO and scope, from opening to resolution (not per evaluation).
incidents = Table(
    "incidents",
    metadata,
    Column("id", Integer, nullable=False, autoincrement=True),
    Column("slo", String(128), nullable=False),
    Column("scope", String(1024), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("state", String(16), nullable=False),
    Column("opened_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("resolved_at", UTCDateTime(), nullable=True),
    Column("peak_burn_rate", Float(53), nullable=False),
    Column("burn_rates", Text, nullable=False),
    Column("recovering_since", UTCDateTime(), nullable=True),
    PrimaryKeyConstraint("id"),
    Index("ix_incidents_slo_scope_state", "slo", "scope", "state"),
    Index("ix_incidents_state_opened_at", "state", "opened_at"),
)

#: An incident's diagnoses after its onset and its lifecycle steps (issue 13), oldest first.
incident_history = Table(
    "incident_history",
    metadata,
    Column("id", Integer, nullable=False, autoincrement=True),
    Column("incident_id", Integer, nullable=False),
    Column("at", UTCDateTime(), nullable=False),
    Column("verdict", String(16), nullable=False),
    Column("cause", String(64), nullable=False),
    Column("diagnosis", Text, nullable=True),
    PrimaryKeyConstraint("id"),
    Index("ix_incident_history_incident_id", "incident_id", "id"),
)

#: The burn rates an evaluation saw for an open incident (at most one point a minute).
incident_burn_points = Table(
    "incident_burn_points",
    metadata,
    Column("incident_id", Integer, nullable=False),
    Column("at", UTCDateTime(), nullable=False),
    Column("burn_rates", Text, nullable=False),
    PrimaryKeyConstraint("incident_id", "at"),
)

# -- Diagnoses, silences and the notification outbox (issue 6) ------------------------------

#: The latest diagnosis of an incident and its acknowledgement (one row per incident).
incident_diagnoses = Table(
    "incident_diagnoses",
    metadata,
    Column("incident_id", Integer, nullable=False),
    Column("symptom", Text, nullable=False),
    Column("diagnosis", Text, nullable=False),
    Column("diagnosed_at", UTCDateTime(), nullable=False),
    Column("acknowledged_at", UTCDateTime(), nullable=True),
    Column("acknowledged_by", String(128), nullable=False, server_default=""),
    PrimaryKeyConstraint("incident_id"),
)

#: Silences: incidents whose labels match ``matchers`` (JSON) are not notified until ``ends_at``.
silences = Table(
    "silences",
    metadata,
    Column("id", Integer, nullable=False, autoincrement=True),
    Column("matchers", Text, nullable=False),
    Column("starts_at", UTCDateTime(), nullable=False),
    Column("ends_at", UTCDateTime(), nullable=False),
    Column("created_by", String(128), nullable=False, server_default=""),
    Column("comment", String(1024), nullable=False, server_default=""),
    Column("created_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("id"),
    Index("ix_silences_ends_at", "ends_at"),
)

#: Notifications to deliver: one row per (notifier, key); survives restarts, retried with backoff.
outbox = Table(
    "outbox",
    metadata,
    Column("id", Integer, nullable=False, autoincrement=True),
    Column("notifier", String(64), nullable=False),
    Column("key", String(256), nullable=False),
    Column("payload", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("next_attempt_at", UTCDateTime(), nullable=False),
    Column("delivered_at", UTCDateTime(), nullable=True),
    Column("last_error", String(1024), nullable=False, server_default=""),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("notifier", "key"),
    Index("ix_outbox_state_next_attempt_at", "state", "next_attempt_at"),
)

# -- Cost models and cost reports (issue 7) -------------------------------------------------

#: Cost models applied by operators (``infersight cost apply``); ``spec`` is ``storage.cost``'s
#: JSON form of ``core.cost.CostModel``.
cost_models = Table(
    "cost_models",
    metadata,
    Column("name", String(128), nullable=False),
    Column("spec", Text, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("name"),
)

#: Generated cost reports: one per kind and period (``weekly`` / ``2026-W48``), regenerating
#: replaces it. ``body`` is the report's JSON; ``html`` and ``csv`` its other renderings.
cost_reports = Table(
    "cost_reports",
    metadata,
    Column("id", Integer, nullable=False, autoincrement=True),
    Column("kind", String(16), nullable=False),
    Column("period", String(32), nullable=False),
    Column("start", UTCDateTime(), nullable=False),
    Column("end", UTCDateTime(), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("summary", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("html", Text, nullable=False),
    Column("csv", Text, nullable=False),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("kind", "period"),
    Index("ix_cost_reports_kind_start", "kind", "start"),
)

# -- Baselines (issue 8) --------------------------------------------------------------------

#: One row per named baseline; ``document`` is ``core.baseline.to_dict`` as JSON (sketches
#: included), the other columns are what a listing shows without decoding it.
baselines = Table(
    "baselines",
    metadata,
    Column("name", String(128), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("source", String(16), nullable=False),
    Column("description", String(1024), nullable=False, server_default=""),
    Column("document", Text, nullable=False),
    PrimaryKeyConstraint("name"),
    Index("ix_baselines_created_at", "created_at"),
)

# -- Load-test runs (issue 8) ---------------------------------------------------------------

#: One row per load-test run: what was driven where, its phases, configuration and generator
#: warnings (JSON), and the request counts a listing shows.
loadtest_runs = Table(
    "loadtest_runs",
    metadata,
    Column("id", Integer, nullable=False, autoincrement=True),
    Column("name", String(128), nullable=False),
    Column("scenario", String(16), nullable=False),
    Column("target", String(1024), nullable=False),
    Column("model", LABEL, nullable=False),
    Column("started_at", UTCDateTime(), nullable=False),
    Column("duration_s", Float(53), nullable=False),
    Column("requests", Integer, nullable=False),
    Column("errors", Integer, nullable=False),
    Column("phases", Text, nullable=False),
    Column("config", Text, nullable=False),
    Column("warnings", Text, nullable=False),
    PrimaryKeyConstraint("id"),
    Index("ix_loadtest_runs_started_at", "started_at"),
)

#: One row per request of a run, as the client measured it; ``itl`` holds the inter-token
#: gaps as little-endian float32 seconds (a long output has thousands).
loadtest_results = Table(
    "loadtest_results",
    metadata,
    Column("run_id", Integer, ForeignKey("loadtest_runs.id", ondelete="CASCADE"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("phase", Integer, nullable=False),
    Column("sent_s", Float(53), nullable=False),
    Column("e2e_s", Float(53), nullable=False),
    Column("ttft_s", Float(53), nullable=True),
    Column("tpot_s", Float(53), nullable=True),
    Column("itl", LargeBinary, nullable=False),
    Column("input_tokens", Integer, nullable=False),
    Column("output_tokens", Integer, nullable=False),
    Column("status", String(8), nullable=False),
    Column("error", String(256), nullable=False, server_default=""),
    Column("trace_id", String(32), nullable=False, server_default=""),
    PrimaryKeyConstraint("run_id", "seq"),
)

# -- GPU-sample rollups and good-token day totals (issues 7 and 9) -------------------------

#: A GPU rollup keeps per-sample sums and counts of ``GPU_ROLLUP_MEANS``, a count per
#: ``GPU_ROLLUP_REASONS`` clock-event reason and a ``GPU_UTIL_BINS``-bin utilisation histogram
#: (``core.gpu_intervals`` defines them, for both stores).

gpu_rollups = Table(
    "gpu_rollups",
    metadata,
    Column("resolution", String(2), nullable=False),
    Column("bucket", UTCDateTime(), nullable=False),
    Column("instance", LABEL, nullable=False),
    Column("gpu_index", SmallInteger, nullable=False),
    Column("name", LABEL, nullable=False, server_default=""),
    # The slice the GPU is (``core.gpu_slice``; revision 0021): what cost prices it at.
    Column("gpu_slice", String(64), nullable=False, server_default=""),
    # Per sample (the GPU page's means and throttled shares, a baseline's utilisation).
    Column("samples", BigInteger, nullable=False, server_default="0"),
    *(
        column
        for field in GPU_ROLLUP_MEANS
        for column in (
            Column(f"{field}_sum", Float(53), nullable=False, server_default="0"),
            Column(f"{field}_n", BigInteger, nullable=False, server_default="0"),
        )
    ),
    Column("throttled_samples", BigInteger, nullable=False, server_default="0"),
    *(
        Column(f"reason_{reason}", BigInteger, nullable=False, server_default="0")
        for reason in GPU_ROLLUP_REASONS
    ),
    Column("ecc_sbe_max", Float(53), nullable=True),
    Column("ecc_dbe_max", Float(53), nullable=True),
    Column("xid_max", Integer, nullable=True),
    # Per second that samples cover (cost): see ``storage.gpu_rollup``.
    Column("covered_s", Float(53), nullable=False, server_default="0"),
    Column("util_s", Float(53), nullable=False, server_default="0"),
    Column("util_weighted_s", Float(53), nullable=False, server_default="0"),
    Column("energy_j", Float(53), nullable=False, server_default="0"),
    Column("throttled_s", Float(53), nullable=False, server_default="0"),
    *(
        Column(f"util_bin_{k:02d}", Float(53), nullable=False, server_default="0")
        for k in range(GPU_UTIL_BINS)
    ),
    PrimaryKeyConstraint("resolution", "bucket", "instance", "gpu_index"),
)

#: Good tokens per UTC hour and day and series for one set of ``core.goodput.GoodLimits`` (TTFT,
#: TPOT and end-to-end seconds, 0 for no limit; ``e2e_s`` since revision 0008), with the number
#: of requests they were counted over (``storage.good_tokens``): kept past raw retention.
good_token_counts = Table(
    "good_token_counts",
    metadata,
    Column("ttft_s", Float(53), nullable=False),
    Column("tpot_s", Float(53), nullable=False),
    Column("e2e_s", Float(53), nullable=False, server_default="0"),
    Column("resolution", String(2), nullable=False),
    Column("bucket", UTCDateTime(), nullable=False),
    *(Column(name, LABEL, nullable=False) for name in GROUP_LABELS),
    Column("requests", BigInteger, nullable=False),
    Column("good_tokens", BigInteger, nullable=False),
    PrimaryKeyConstraint("ttft_s", "tpot_s", "e2e_s", "resolution", "bucket", *GROUP_LABELS),
)

# -- Dashboard sessions (issue 14) -----------------------------------------------------------

#: Signed-out dashboard sessions: the SHA-256 of the cookie, kept until it would have expired.
revoked_sessions = Table(
    "revoked_sessions",
    metadata,
    Column("digest", String(64), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("digest"),
    Index("ix_revoked_sessions_expires_at", "expires_at"),
)

# -- Scaling recommendations and policies (issue 17) -----------------------------------------

#: Scaling policies applied by operators (``infersight scaling apply``); ``spec`` is
#: ``storage.scaling``'s JSON form of ``core.scaling.ScalingPolicy``.
scaling_policies = Table(
    "scaling_policies",
    metadata,
    Column("name", String(128), nullable=False),
    Column("spec", Text, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("name"),
)

#: One row per model per recommender cycle (``service.scaling``): what it saw and decided, and
#: why (``stale``: the JSON list of inputs that were stale or missing).
scaling_recommendations = Table(
    "scaling_recommendations",
    metadata,
    Column("model", LABEL, nullable=False),
    # "" for a model served whole; "prefill" or "decode" for a disaggregated model's pool.
    Column("pool", String(16), nullable=False, server_default=""),
    Column("at", UTCDateTime(), nullable=False),
    Column("observed", Integer, nullable=False),
    Column("desired", Integer, nullable=False),
    Column("predictive", Integer, nullable=True),
    Column("reactive", Integer, nullable=True),
    Column("forecast_rps", Float(53), nullable=True),
    Column("driver", String(32), nullable=False),
    Column("reason", String(1024), nullable=False),
    Column("stale", Text, nullable=False, server_default="[]"),
    PrimaryKeyConstraint("model", "pool", "at"),
    Index("ix_scaling_recommendations_at", "at"),
)

# -- Profiles of serving processes (issue 37) ------------------------------------------------

#: Profile requests and their results: the service (or an operator) inserts a pending row,
#: the instance's sidecar claims it (running), samples the serving process and stores the
#: summary (``core.profile.summarise``, JSON) or why there is none (``error``).
profiles = Table(
    "profiles",
    metadata,
    Column("id", Integer, nullable=False, autoincrement=True),
    Column("instance", LABEL, nullable=False),
    Column("incident_id", Integer, nullable=True),
    Column("reason", String(16), nullable=False),
    Column("state", String(16), nullable=False),
    Column("seconds", Float(53), nullable=False),
    Column("rate", Integer, nullable=False),
    Column("requested_at", UTCDateTime(), nullable=False),
    Column("requested_by", String(128), nullable=False, server_default=""),
    Column("claimed_at", UTCDateTime(), nullable=True),
    Column("finished_at", UTCDateTime(), nullable=True),
    Column("result", Text, nullable=True),
    Column("error", String(1024), nullable=False, server_default=""),
    PrimaryKeyConstraint("id"),
    Index("ix_profiles_instance_state", "instance", "state"),
    Index("ix_profiles_incident_id", "incident_id"),
)

# -- Cloud bills in FOCUS (issue 34) ---------------------------------------------------------

#: One row per imported FOCUS file (``storage.bills``): its SHA-256 (a file is imported once),
#: the covered charge period, the mapping of lines to instances used (JSON), and totals.
bill_imports = Table(
    "bill_imports",
    metadata,
    Column("id", Integer, nullable=False, autoincrement=True),
    Column("name", String(256), nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("format", String(16), nullable=False),
    Column("rows", Integer, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("period_start", UTCDateTime(), nullable=False),
    Column("period_end", UTCDateTime(), nullable=False),
    Column("billed", String(48), nullable=False),
    Column("mapping", Text, nullable=False),
    Column("imported_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("sha256"),
)

#: The charges of an imported file, one per row (``line`` is its row number in the file);
#: amounts are decimal text (nothing rounded through floats); ``instance`` is the infersight
#: instance the import's mapping named (``""``: none).
bill_lines = Table(
    "bill_lines",
    metadata,
    Column("import_id", Integer, ForeignKey("bill_imports.id"), nullable=False),
    Column("line", Integer, nullable=False),
    Column("start", UTCDateTime(), nullable=False),
    Column("end", UTCDateTime(), nullable=False),
    Column("category", String(16), nullable=False),
    Column("charge_class", String(1024), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("billed", String(48), nullable=False),
    Column("effective", String(48), nullable=False),
    Column("list_cost", String(48), nullable=True),
    Column("provider", String(1024), nullable=False),
    Column("service", String(1024), nullable=False),
    Column("resource_id", String(1024), nullable=False),
    Column("resource_name", String(1024), nullable=False),
    Column("resource_type", String(1024), nullable=False),
    Column("sku_id", String(1024), nullable=False),
    Column("sku_price_id", String(1024), nullable=False),
    Column("pricing_unit", String(1024), nullable=False),
    Column("pricing_quantity", String(48), nullable=True),
    Column("consumed_quantity", String(48), nullable=True),
    Column("consumed_unit", String(1024), nullable=False),
    Column("tags", Text, nullable=False),
    Column("instance", LABEL, nullable=False),
    PrimaryKeyConstraint("import_id", "line"),
    Index("ix_bill_lines_start", "start"),
)

# -- Budgets and the cost models seen (issue 34) ---------------------------------------------

#: Budget documents (``storage.budgets``), one row per version: applying a changed document adds
#: version n + 1; the newest version is the budget in force, the older ones its history.
budgets = Table(
    "budgets",
    metadata,
    Column("name", String(128), nullable=False),
    Column("version", Integer, nullable=False),
    Column("spec", Text, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("name", "version"),
)

#: The scheduled jobs' last results (``storage.job_results``): one row per job, JSON, written
#: by the leader and shown by every worker's pages while fresh.
job_results = Table(
    "job_results",
    metadata,
    Column("job", String(32), primary_key=True),
    Column("computed_at", UTCDateTime(), nullable=False),
    Column("body", Text, nullable=False),
)

#: The cost model in force, one row each time it changed (recorded by the budget job): the
#: cost-step alert prices a baseline with the version in force then (``storage.budgets``).
cost_model_versions = Table(
    "cost_model_versions",
    metadata,
    Column("name", String(128), nullable=False),
    Column("version", Integer, nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("spec", Text, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("name", "version"),
)
