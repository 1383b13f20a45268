"""Requests know their serving topology: LoRA adapter, disaggregated role, the P/D stages.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06

Issue 30. A request record names the LoRA adapter it was served with (``adapter``; "" for the
base model) and, where prefill and decode run on different instances, its role: a user's
request is stored once, on its decode side (``role = 'decode'``, ``peer`` naming the prefill
side), with two more stages (``route_s``: the proxy's routing before the prefill leg;
``kv_transfer_s``: from the prefill leg's end until the decode instance could schedule the
request). Rollups keep a sketch of each new stage. The prefill legs themselves go to
``request_parts``, a table shaped like ``requests`` (partitioned and kept the same way) that
no request count or token total reads. Rows stored before this revision read as unified
requests of the base model, with no P/D stages.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# Frozen here on purpose: a migration must not follow later changes to ``core.records``.
_LABELS = ("model", "tenant", "priority", "operation")
_DURATIONS = (
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "queue_s",
    "prefill_s",
    "decode_s",
    "preprocess_s",
    "postprocess_s",
    "gateway_s",
    "route_s",
    "kv_transfer_s",
)
_NEW_DURATIONS = ("route_s", "kv_transfer_s")
_NEW_SKETCHES = ("route_sketch", "kv_transfer_sketch")


def _topology_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("adapter", sa.String(256), nullable=False, server_default=""),
        sa.Column("role", sa.String(8), nullable=False, server_default=""),
        sa.Column("peer", sa.String(256), nullable=False, server_default=""),
    ]


def upgrade() -> None:
    # On PostgreSQL a column added to a partitioned table is added to every partition.
    for column in _topology_columns():
        op.add_column("requests", column)
    for name in _NEW_DURATIONS:
        op.add_column("requests", sa.Column(name, sa.Float(53), nullable=True))
    for name in _NEW_SKETCHES:
        op.add_column("request_rollups", sa.Column(name, sa.LargeBinary, nullable=True))
    op.create_table(
        "request_parts",
        sa.Column("start", UTCDateTime(), nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("span_id", sa.String(16), nullable=False),
        sa.Column("instance", sa.String(256), nullable=False),
        sa.Column("service", sa.String(256), nullable=False, server_default=""),
        sa.Column("engine", sa.String(16), nullable=False, server_default="generic"),
        *(sa.Column(name, sa.String(256), nullable=False, server_default="") for name in _LABELS),
        *(sa.Column(name, sa.Float(53), nullable=True) for name in _DURATIONS),
        sa.Column("input_tokens", sa.Integer, nullable=True),
        sa.Column("output_tokens", sa.Integer, nullable=True),
        sa.Column("cached_tokens", sa.Integer, nullable=True),
        sa.Column("status", sa.String(8), nullable=False, server_default="ok"),
        sa.Column("error_type", sa.String(256), nullable=False, server_default=""),
        sa.Column("finish_reason", sa.String(256), nullable=False, server_default=""),
        *_topology_columns(),
        sa.PrimaryKeyConstraint("start", "trace_id", "span_id", name="pk_request_parts"),
        postgresql_partition_by="RANGE (start)",
    )


def downgrade() -> None:
    # Dropping a partitioned parent drops its partitions with it.
    op.drop_table("request_parts")
    with op.batch_alter_table("request_rollups") as batch:
        for name in _NEW_SKETCHES:
            batch.drop_column(name)
    with op.batch_alter_table("requests") as batch:
        for name in (*_NEW_DURATIONS, "adapter", "role", "peer"):
            batch.drop_column(name)
