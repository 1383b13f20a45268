"""Attribution from the trace: team and workload are series labels; gateway spans are kept.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-08

Issue 34 ("attribution from the trace"). ``requests`` and ``request_parts`` gain ``team`` and
``workload`` (who the request was for besides its tenant, filled by the store from its trace's
gateway or client span); ``request_rollups`` and ``good_token_counts`` gain them in their
primary key, so that throughput, latency, SLOs and cost come out per team and workload.
``trace_attributions`` keeps what each gateway or client span named (tenant, team, workload,
adapter), partitioned by day on PostgreSQL like ``requests`` and read by trace id. Rows stored
before read as unattributed (empty team and workload), as they were.

The downgrade cannot merge the rollups of several teams or workloads into one row in SQL: it
drops the rollup and good-token rows of attributed series (the raw requests keep their other
labels).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

# Frozen here on purpose: a migration must not follow later changes to ``core.records``.
_LABELS = ("model", "instance", "tenant", "priority", "adapter")
_NEW = ("team", "workload")
_KEYS = {
    "request_rollups": ("resolution", "bucket", *_LABELS),
    "good_token_counts": ("ttft_s", "tpot_s", "e2e_s", "resolution", "bucket", *_LABELS),
}


def _label(name: str) -> sa.Column[str]:
    return sa.Column(name, sa.String(256), nullable=False, server_default="")


def upgrade() -> None:
    for table in ("requests", "request_parts"):
        for name in _NEW:
            op.add_column(table, _label(name))
    for table, key in _KEYS.items():
        with op.batch_alter_table(table) as batch:
            for name in _NEW:
                batch.add_column(_label(name))
            batch.drop_constraint(f"pk_{table}", type_="primary")
            batch.create_primary_key(f"pk_{table}", [*key, *_NEW])
    op.create_table(
        "trace_attributions",
        sa.Column("start", UTCDateTime(), nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("span_id", sa.String(16), nullable=False),
        sa.Column("duration_s", sa.Float(53), nullable=False, server_default="0"),
        *(_label(name) for name in ("tenant", "team", "workload", "adapter")),
        sa.Column("source", sa.String(64), nullable=False, server_default=""),
        sa.PrimaryKeyConstraint("start", "trace_id", "span_id", name="pk_trace_attributions"),
        postgresql_partition_by="RANGE (start)",
    )
    op.create_index("ix_trace_attributions_trace_id", "trace_attributions", ["trace_id"])


def downgrade() -> None:
    op.drop_index("ix_trace_attributions_trace_id", table_name="trace_attributions")
    # Dropping a partitioned parent drops its partitions with it.
    op.drop_table("trace_attributions")
    for table, key in _KEYS.items():
        op.execute(f"DELETE FROM {table} WHERE team <> '' OR workload <> ''")
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(f"pk_{table}", type_="primary")
            batch.create_primary_key(f"pk_{table}", list(key))
            for name in reversed(_NEW):
                batch.drop_column(name)
    for table in ("request_parts", "requests"):
        for name in reversed(_NEW):
            op.drop_column(table, name)
