"""Cost models and stored cost reports.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

``cost_models`` keeps the cost models operators apply (prices per GPU-hour, energy, overhead),
keyed by name; ``cost_reports`` keeps generated reports (JSON, HTML and CSV), one per kind and
period.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cost_models",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_cost_models"),
    )
    op.create_table(
        "cost_reports",
        sa.Column("id", sa.Integer, nullable=False, autoincrement=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("period", sa.String(32), nullable=False),
        sa.Column("start", UTCDateTime(), nullable=False),
        sa.Column("end", UTCDateTime(), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("html", sa.Text, nullable=False),
        sa.Column("csv", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_cost_reports"),
        sa.UniqueConstraint("kind", "period", name="uq_cost_reports_kind_period"),
    )
    op.create_index("ix_cost_reports_kind_start", "cost_reports", ["kind", "start"])


def downgrade() -> None:
    op.drop_table("cost_reports")
    op.drop_table("cost_models")
