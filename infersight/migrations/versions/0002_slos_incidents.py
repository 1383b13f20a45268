"""SLO definitions and incidents.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

``slos`` holds one JSON definition per SLO; ``incidents`` one row per alert of an SLO and
scope, kept after resolution as history (no foreign key: deleting an SLO keeps its incidents).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "slos",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_slos"),
    )
    op.create_table(
        "incidents",
        sa.Column("id", sa.Integer, nullable=False, autoincrement=True),
        sa.Column("slo", sa.String(128), nullable=False),
        sa.Column("scope", sa.String(1024), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("opened_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("resolved_at", UTCDateTime(), nullable=True),
        sa.Column("peak_burn_rate", sa.Float(53), nullable=False),
        sa.Column("burn_rates", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_incidents"),
    )
    op.create_index("ix_incidents_slo_scope_state", "incidents", ["slo", "scope", "state"])
    op.create_index("ix_incidents_state_opened_at", "incidents", ["state", "opened_at"])


def downgrade() -> None:
    op.drop_table("incidents")
    op.drop_table("slos")
