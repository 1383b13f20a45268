"""Initial schema: raw requests, request rollups, GPU and server samples.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Raw tables are range-partitioned by day on PostgreSQL (partitions are created by the writer and
the maintenance job, see storage.partitions); on SQLite they are plain tables.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

DURATIONS = (
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "queue_s",
    "prefill_s",
    "decode_s",
    "preprocess_s",
    "postprocess_s",
    "gateway_s",
)
LABELS = ("model", "instance", "tenant", "priority")
GPU_FLOATS = (
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
SERVER_FLOATS = (
    "requests_running",
    "requests_waiting",
    "requests_swapped",
    "kv_cache_usage",
    "prefix_cache_hit_ratio",
    "preemptions_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "requests_total",
    "request_errors_total",
)


def _label(name: str, default: str | None = "") -> sa.Column[str]:
    return sa.Column(name, sa.String(256), nullable=False, server_default=default)


def upgrade() -> None:
    op.create_table(
        "requests",
        sa.Column("start", UTCDateTime(), nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("span_id", sa.String(16), nullable=False),
        sa.Column("instance", sa.String(256), nullable=False),
        _label("service"),
        sa.Column("engine", sa.String(16), nullable=False, server_default="generic"),
        _label("model"),
        _label("tenant"),
        _label("priority"),
        _label("operation"),
        *(sa.Column(name, sa.Float(53), nullable=True) for name in DURATIONS),
        sa.Column("input_tokens", sa.Integer, nullable=True),
        sa.Column("output_tokens", sa.Integer, nullable=True),
        sa.Column("cached_tokens", sa.Integer, nullable=True),
        sa.Column("status", sa.String(8), nullable=False, server_default="ok"),
        _label("error_type"),
        _label("finish_reason"),
        sa.PrimaryKeyConstraint("start", "trace_id", "span_id", name="pk_requests"),
        postgresql_partition_by="RANGE (start)",
    )

    op.create_table(
        "request_rollups",
        sa.Column("resolution", sa.String(2), nullable=False),
        sa.Column("bucket", UTCDateTime(), nullable=False),
        *(sa.Column(name, sa.String(256), nullable=False) for name in LABELS),
        sa.Column("requests", sa.BigInteger, nullable=False),
        sa.Column("errors", sa.BigInteger, nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("cached_tokens", sa.BigInteger, nullable=False),
        *(
            sa.Column(f"{name.removesuffix('_s')}_sketch", sa.LargeBinary, nullable=True)
            for name in DURATIONS
        ),
        sa.PrimaryKeyConstraint("resolution", "bucket", *LABELS, name="pk_request_rollups"),
    )

    op.create_table(
        "gpu_samples",
        sa.Column("ts", UTCDateTime(), nullable=False),
        sa.Column("instance", sa.String(256), nullable=False),
        sa.Column("gpu_index", sa.SmallInteger, nullable=False),
        _label("uuid"),
        _label("name"),
        *(sa.Column(name, sa.Float(53), nullable=True) for name in GPU_FLOATS),
        sa.Column("throttle_reasons", sa.String(512), nullable=False, server_default=""),
        sa.Column("ecc_sbe_total", sa.Float(53), nullable=True),
        sa.Column("ecc_dbe_total", sa.Float(53), nullable=True),
        sa.Column("xid_last", sa.Integer, nullable=True),
        sa.Column("sm_occupancy", sa.Float(53), nullable=True),
        sa.Column("dram_bw_util", sa.Float(53), nullable=True),
        sa.Column("tensor_util", sa.Float(53), nullable=True),
        sa.PrimaryKeyConstraint("ts", "instance", "gpu_index", name="pk_gpu_samples"),
        postgresql_partition_by="RANGE (ts)",
    )
    op.create_index("ix_gpu_samples_instance_ts", "gpu_samples", ["instance", "ts"])

    op.create_table(
        "server_samples",
        sa.Column("ts", UTCDateTime(), nullable=False),
        sa.Column("instance", sa.String(256), nullable=False),
        sa.Column("engine", sa.String(16), nullable=False, server_default="generic"),
        _label("model"),
        *(sa.Column(name, sa.Float(53), nullable=True) for name in SERVER_FLOATS),
        sa.PrimaryKeyConstraint("ts", "instance", name="pk_server_samples"),
        postgresql_partition_by="RANGE (ts)",
    )
    op.create_index("ix_server_samples_instance_ts", "server_samples", ["instance", "ts"])


def downgrade() -> None:
    # Dropping a partitioned parent drops its partitions with it.
    op.drop_table("server_samples")
    op.drop_table("gpu_samples")
    op.drop_table("request_rollups")
    op.drop_table("requests")
