"""GPU slices: MIG slices and time-sliced shares.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06

Issue 34 ("fractional GPUs"). ``gpu_samples`` records the slice a device is
(``core.gpu_slice``: ``mig:3g.40gb:3/7`` or ``share:1/4``), a MIG slice's parent GPU and its GPU
instance id; ``gpu_rollups`` the slice, which cost prices the GPU's time by. Rows stored
before are whole GPUs (empty slice), as they were priced.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "gpu_samples", sa.Column("gpu_slice", sa.String(64), nullable=False, server_default="")
    )
    op.add_column(
        "gpu_samples", sa.Column("parent_uuid", sa.String(256), nullable=False, server_default="")
    )
    op.add_column("gpu_samples", sa.Column("gpu_instance_id", sa.Integer(), nullable=True))
    op.add_column(
        "gpu_rollups", sa.Column("gpu_slice", sa.String(64), nullable=False, server_default="")
    )


def downgrade() -> None:
    op.drop_column("gpu_rollups", "gpu_slice")
    op.drop_column("gpu_samples", "gpu_instance_id")
    op.drop_column("gpu_samples", "parent_uuid")
    op.drop_column("gpu_samples", "gpu_slice")
