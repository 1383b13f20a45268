"""Replica recommendations per pool: a disaggregated model's prefill and decode pools apart.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-08

Issue 30 ("roles as pools"). ``scaling_recommendations`` gains ``pool`` ("" for a model whose
instances serve whole requests; "prefill" or "decode" for a disaggregated model's pool) in its
primary key, so that each pool of a split model has its own recommendation per cycle. Rows
kept before this revision were made for the whole model: they read as pool "".

The downgrade keeps only the pool "" rows (a whole model's recommendations): two pools'
counts cannot be folded into one.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_TABLE = "scaling_recommendations"
_PK = f"pk_{_TABLE}"


def upgrade() -> None:
    with op.batch_alter_table(_TABLE) as batch:
        batch.add_column(sa.Column("pool", sa.String(16), nullable=False, server_default=""))
        batch.drop_constraint(_PK, type_="primary")
        batch.create_primary_key(_PK, ["model", "pool", "at"])


def downgrade() -> None:
    op.execute(f"DELETE FROM {_TABLE} WHERE pool <> ''")
    with op.batch_alter_table(_TABLE) as batch:
        batch.drop_constraint(_PK, type_="primary")
        batch.create_primary_key(_PK, ["model", "at"])
        batch.drop_column("pool")
