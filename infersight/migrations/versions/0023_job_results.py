"""The scheduled jobs' last results, shared by every ``serve`` worker.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06

Issue 35 ("cache-miss pages under a second"). ``job_results`` keeps one row per job: the
evaluation's last cycle (each SLO's event counts per window) and the money job's (each
budget's status and each cost step), as JSON with the instant they were computed at. The
leader writes them; the pages of every worker of ``serve --workers N`` show them while they are
fresh instead of counting every SLO and pricing every budget again per view (only the leader's
process had them before).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_results",
        sa.Column("job", sa.String(32), primary_key=True),
        sa.Column("computed_at", UTCDateTime(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("job_results")
