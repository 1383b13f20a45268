"""Profiles of serving processes, requested and stored with incidents.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06

Issue 37 ("what the host is doing when it is the bottleneck"). ``profiles`` holds profile
requests (for an instance, manual or for an incident) and their results: a sidecar claims a
pending row, samples its serving process with py-spy and stores the folded summary, or why
there is none ("not permitted: …").
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "profiles",
        sa.Column("id", sa.Integer(), nullable=False, autoincrement=True),
        sa.Column("instance", sa.String(256), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=True),
        sa.Column("reason", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("seconds", sa.Float(53), nullable=False),
        sa.Column("rate", sa.Integer(), nullable=False),
        sa.Column("requested_at", UTCDateTime(), nullable=False),
        sa.Column("requested_by", sa.String(128), nullable=False, server_default=""),
        sa.Column("claimed_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("error", sa.String(1024), nullable=False, server_default=""),
        sa.PrimaryKeyConstraint("id", name="pk_profiles"),
    )
    op.create_index("ix_profiles_instance_state", "profiles", ["instance", "state"])
    op.create_index("ix_profiles_incident_id", "profiles", ["incident_id"])


def downgrade() -> None:
    op.drop_table("profiles")
