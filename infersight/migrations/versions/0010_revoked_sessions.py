"""Revoked dashboard sessions.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01

A dashboard session is a signed cookie that needs no server state to be checked; signing out
records its digest here (until it would have expired anyway), so a copy of the cookie is
refused on every replica. Rows past ``expires_at`` are pruned as new ones arrive.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "revoked_sessions",
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("digest", name="pk_revoked_sessions"),
    )
    op.create_index("ix_revoked_sessions_expires_at", "revoked_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_table("revoked_sessions")
