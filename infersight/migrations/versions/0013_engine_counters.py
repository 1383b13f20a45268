"""Server samples keep the counters behind their ratios, speculative decoding and P/D figures.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06

Issue 30. The prefix-cache hit ratio is now taken over the interval between two scrapes from
the engine's counters (hits and queries, pooled over data-parallel engines), never from a
cumulative or last-batch gauge, so both counters are kept beside it. Speculative decoding gets
its counters (drafts, draft tokens, accepted tokens) and the two figures derived from them
(acceptance rate, mean acceptance length); a disaggregated pair its decode-side figures
(requests held while their KV cache arrives, prompt tokens received by KV transfer); vLLM its
admission rejections. Rows stored before this revision have NULL in every new column; their
prefix-cache hit ratios stay as they were read.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

NEW_FLOATS = (
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    "spec_drafts_total",
    "spec_draft_tokens_total",
    "spec_accepted_tokens_total",
    "spec_acceptance_rate",
    "spec_accept_length",
    "requests_deferred",
    "kv_transfer_tokens_total",
    "admission_rejections_total",
)
TABLES = ("server_samples", "server_engine_samples")


def upgrade() -> None:
    # On PostgreSQL a column added to a partitioned table is added to every partition.
    for table in TABLES:
        for name in NEW_FLOATS:
            op.add_column(table, sa.Column(name, sa.Float(53), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            for name in NEW_FLOATS:
                batch.drop_column(name)
