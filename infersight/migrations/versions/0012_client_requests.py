"""Client records: what a caller's GenAI instrumentation measured around each call.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03

``client_requests`` holds one row per CLIENT span of an OpenTelemetry GenAI client
instrumentation (``core.client.ClientRecord``): the client's end to end time and time to first
token, kept apart from the server's ``requests``. Partitioned by day on PostgreSQL and kept for
the raw retention, like ``requests``, with the same key, so a replayed span is stored once.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_LABELS = ("service", "source", "provider", "model", "tenant", "operation")


def upgrade() -> None:
    op.create_table(
        "client_requests",
        sa.Column("start", UTCDateTime(), nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("span_id", sa.String(16), nullable=False),
        *(sa.Column(name, sa.String(256), nullable=False, server_default="") for name in _LABELS),
        sa.Column("e2e_s", sa.Float(53), nullable=True),
        sa.Column("ttft_s", sa.Float(53), nullable=True),
        sa.Column("ttft_source", sa.String(16), nullable=False, server_default=""),
        sa.Column("input_tokens", sa.Integer, nullable=True),
        sa.Column("output_tokens", sa.Integer, nullable=True),
        sa.Column("status", sa.String(8), nullable=False, server_default="ok"),
        sa.Column("error_type", sa.String(256), nullable=False, server_default=""),
        sa.PrimaryKeyConstraint("start", "trace_id", "span_id", name="pk_client_requests"),
        postgresql_partition_by="RANGE (start)",
    )


def downgrade() -> None:
    # Dropping a partitioned parent drops its partitions with it.
    op.drop_table("client_requests")
