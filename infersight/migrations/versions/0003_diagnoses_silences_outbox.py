"""Incident diagnoses, silences and the notification outbox.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

``incident_diagnoses`` keeps the latest diagnosis and the acknowledgement of each incident;
``silences`` mutes matching incidents until an expiry; ``outbox`` holds notifications until a
notifier accepts them (one row per notifier and idempotency key, so a retry never pages twice).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "incident_diagnoses",
        sa.Column("incident_id", sa.Integer, nullable=False),
        sa.Column("symptom", sa.Text, nullable=False),
        sa.Column("diagnosis", sa.Text, nullable=False),
        sa.Column("diagnosed_at", UTCDateTime(), nullable=False),
        sa.Column("acknowledged_at", UTCDateTime(), nullable=True),
        sa.Column("acknowledged_by", sa.String(128), nullable=False, server_default=""),
        sa.PrimaryKeyConstraint("incident_id", name="pk_incident_diagnoses"),
    )
    op.create_table(
        "silences",
        sa.Column("id", sa.Integer, nullable=False, autoincrement=True),
        sa.Column("matchers", sa.Text, nullable=False),
        sa.Column("starts_at", UTCDateTime(), nullable=False),
        sa.Column("ends_at", UTCDateTime(), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False, server_default=""),
        sa.Column("comment", sa.String(1024), nullable=False, server_default=""),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_silences"),
    )
    op.create_index("ix_silences_ends_at", "silences", ["ends_at"])
    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer, nullable=False, autoincrement=True),
        sa.Column("notifier", sa.String(64), nullable=False),
        sa.Column("key", sa.String(256), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("next_attempt_at", UTCDateTime(), nullable=False),
        sa.Column("delivered_at", UTCDateTime(), nullable=True),
        sa.Column("last_error", sa.String(1024), nullable=False, server_default=""),
        sa.PrimaryKeyConstraint("id", name="pk_outbox"),
        sa.UniqueConstraint("notifier", "key", name="uq_outbox_notifier_key"),
    )
    op.create_index("ix_outbox_state_next_attempt_at", "outbox", ["state", "next_attempt_at"])


def downgrade() -> None:
    op.drop_table("outbox")
    op.drop_table("silences")
    op.drop_table("incident_diagnoses")
