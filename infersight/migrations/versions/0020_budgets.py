"""Budgets and the cost models seen.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06

Issue 34 ("budgets"). ``budgets`` keeps every version of each Budget document;
``cost_model_versions`` each change of the cost model in force, so that a cost-step alert can
price its baseline with the prices of its time. Nothing stored before changes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "budgets",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", "version", name="pk_budgets"),
    )
    op.create_table(
        "cost_model_versions",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", "version", name="pk_cost_model_versions"),
    )


def downgrade() -> None:
    op.drop_table("cost_model_versions")
    op.drop_table("budgets")
