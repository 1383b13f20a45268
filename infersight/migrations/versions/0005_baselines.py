"""Baselines.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30

``baselines`` holds one row per named performance baseline: the listing columns and the
whole baseline (percentiles, throughput, sketches) as a JSON document.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "baselines",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("description", sa.String(1024), nullable=False, server_default=""),
        sa.Column("document", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_baselines"),
    )
    op.create_index("ix_baselines_created_at", "baselines", ["created_at"])


def downgrade() -> None:
    op.drop_table("baselines")
