"""The incident lifecycle: recovering incidents, diagnosis history and burn-rate points.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01

``incidents.recovering_since`` marks an open incident whose symptom has cleared while its
alert still holds. ``incident_history`` keeps every diagnosis of an incident after the one at
its onset (``incident_diagnoses`` keeps the headline) and its lifecycle steps (recovering,
burning again, resolved). ``incident_burn_points`` keeps the burn rates each evaluation saw, at
most one point a minute, for the incident's timeline.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("incidents", sa.Column("recovering_since", UTCDateTime(), nullable=True))
    op.create_table(
        "incident_history",
        sa.Column("id", sa.Integer, nullable=False, autoincrement=True),
        sa.Column("incident_id", sa.Integer, nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("cause", sa.String(64), nullable=False),
        sa.Column("diagnosis", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_incident_history"),
    )
    op.create_index("ix_incident_history_incident_id", "incident_history", ["incident_id", "id"])
    op.create_table(
        "incident_burn_points",
        sa.Column("incident_id", sa.Integer, nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("burn_rates", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("incident_id", "at", name="pk_incident_burn_points"),
    )


def downgrade() -> None:
    op.drop_table("incident_burn_points")
    op.drop_index("ix_incident_history_incident_id", table_name="incident_history")
    op.drop_table("incident_history")
    with op.batch_alter_table("incidents") as batch:
        batch.drop_column("recovering_since")
