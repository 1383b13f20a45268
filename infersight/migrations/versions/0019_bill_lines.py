"""Cloud bills imported in FOCUS: the files and their charges.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06

Issue 34 ("reconciliation with the bill"). ``bill_imports`` holds one row per FOCUS file
imported (its SHA-256, so a file is imported once; the charge period it covers; the mapping
of its lines to instances), ``bill_lines`` the file's charges, amounts as decimal text.
Nothing stored before changes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_TEXT = 1024


def upgrade() -> None:
    op.create_table(
        "bill_imports",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("period_start", UTCDateTime(), nullable=False),
        sa.Column("period_end", UTCDateTime(), nullable=False),
        sa.Column("billed", sa.String(48), nullable=False),
        sa.Column("mapping", sa.Text(), nullable=False),
        sa.Column("imported_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_bill_imports"),
        sa.UniqueConstraint("sha256", name="uq_bill_imports_sha256"),
    )
    op.create_table(
        "bill_lines",
        sa.Column("import_id", sa.Integer(), nullable=False),
        sa.Column("line", sa.Integer(), nullable=False),
        sa.Column("start", UTCDateTime(), nullable=False),
        sa.Column("end", UTCDateTime(), nullable=False),
        sa.Column("category", sa.String(16), nullable=False),
        sa.Column("charge_class", sa.String(_TEXT), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("billed", sa.String(48), nullable=False),
        sa.Column("effective", sa.String(48), nullable=False),
        sa.Column("list_cost", sa.String(48), nullable=True),
        sa.Column("provider", sa.String(_TEXT), nullable=False),
        sa.Column("service", sa.String(_TEXT), nullable=False),
        sa.Column("resource_id", sa.String(_TEXT), nullable=False),
        sa.Column("resource_name", sa.String(_TEXT), nullable=False),
        sa.Column("resource_type", sa.String(_TEXT), nullable=False),
        sa.Column("sku_id", sa.String(_TEXT), nullable=False),
        sa.Column("sku_price_id", sa.String(_TEXT), nullable=False),
        sa.Column("pricing_unit", sa.String(_TEXT), nullable=False),
        sa.Column("pricing_quantity", sa.String(48), nullable=True),
        sa.Column("consumed_quantity", sa.String(48), nullable=True),
        sa.Column("consumed_unit", sa.String(_TEXT), nullable=False),
        sa.Column("tags", sa.Text(), nullable=False),
        sa.Column("instance", sa.String(256), nullable=False),
        sa.ForeignKeyConstraint(
            ["import_id"], ["bill_imports.id"], name="fk_bill_lines_import_id_bill_imports"
        ),
        sa.PrimaryKeyConstraint("import_id", "line", name="pk_bill_lines"),
    )
    op.create_index("ix_bill_lines_start", "bill_lines", ["start"])


def downgrade() -> None:
    op.drop_index("ix_bill_lines_start", table_name="bill_lines")
    op.drop_table("bill_lines")
    op.drop_table("bill_imports")
