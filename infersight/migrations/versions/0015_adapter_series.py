"""LoRA adapters are a series label like model: rollups and good-token counts keep them apart.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07

Issue 30. ``request_rollups`` and ``good_token_counts`` gain ``adapter`` ("" for the base
model's own requests) in their primary key, so that throughput, latency and cost come out
per adapter and add up to the base model's. Rows kept before this revision counted requests
no sidecar had yet attributed to an adapter: they read as the base model's, as they were.

The downgrade cannot merge an adapter's sketches into its base model's rows in SQL; it drops
the adapter rows of both tables (the raw requests keep their adapter until 0014's downgrade).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# Frozen here on purpose: a migration must not follow later changes to ``core.records``.
_LABELS = ("model", "instance", "tenant", "priority")
_KEYS = {
    "request_rollups": ("resolution", "bucket", *_LABELS),
    "good_token_counts": ("ttft_s", "tpot_s", "e2e_s", "resolution", "bucket", *_LABELS),
}


def upgrade() -> None:
    for table, key in _KEYS.items():
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("adapter", sa.String(256), nullable=False, server_default="")
            )
            batch.drop_constraint(f"pk_{table}", type_="primary")
            batch.create_primary_key(f"pk_{table}", [*key, "adapter"])


def downgrade() -> None:
    for table, key in _KEYS.items():
        op.execute(f"DELETE FROM {table} WHERE adapter <> ''")
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(f"pk_{table}", type_="primary")
            batch.create_primary_key(f"pk_{table}", list(key))
            batch.drop_column("adapter")
