"""Late parallel-sampling sequences folded into their stored request, exactly once.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06

Issue 30 ("late parallel-sampling sequences are stored separately"). A request asked for
``n`` > 1 answers is traced as one span per sequence, each exported when its sequence ends;
a sequence that reaches the sidecar after the request was stored is folded into the stored
row by the store writer. ``request_sequences`` names each sequence so folded (its trace and
span id) and the request it went into, so that a sequence shipped twice (a retry, a replay
after a crash) is added once. Nothing stored before changes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "request_sequences",
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("span_id", sa.String(16), nullable=False),
        sa.Column("request_span_id", sa.String(16), nullable=False),
        sa.Column("start", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("trace_id", "span_id", name="pk_request_sequences"),
    )
    op.create_index("ix_request_sequences_start", "request_sequences", ["start"])


def downgrade() -> None:
    op.drop_index("ix_request_sequences_start", table_name="request_sequences")
    op.drop_table("request_sequences")
