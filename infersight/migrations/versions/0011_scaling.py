"""Scaling policies and the replica recommender's recommendations.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02

``scaling_policies`` holds the ``kind: ScalingPolicy`` documents operators apply (one row per
name, like ``slos``); ``scaling_recommendations`` one row per model per recommender cycle, read
by ``GET /api/v1/scaling``, the KEDA endpoint, ``/metrics`` and the Scaling page.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scaling_policies",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_scaling_policies"),
    )
    op.create_table(
        "scaling_recommendations",
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("observed", sa.Integer(), nullable=False),
        sa.Column("desired", sa.Integer(), nullable=False),
        sa.Column("predictive", sa.Integer(), nullable=True),
        sa.Column("reactive", sa.Integer(), nullable=True),
        sa.Column("forecast_rps", sa.Float(53), nullable=True),
        sa.Column("driver", sa.String(32), nullable=False),
        sa.Column("reason", sa.String(1024), nullable=False),
        sa.Column("stale", sa.Text(), nullable=False, server_default="[]"),
        sa.PrimaryKeyConstraint("model", "at", name="pk_scaling_recommendations"),
    )
    op.create_index("ix_scaling_recommendations_at", "scaling_recommendations", ["at"])


def downgrade() -> None:
    op.drop_table("scaling_recommendations")
    op.drop_table("scaling_policies")
