"""Load-test runs and their per-request results.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30

``loadtest_runs`` holds one row per run of ``infersight loadtest`` (phases, configuration and
warnings as JSON); ``loadtest_results`` one row per request, deleted with its run.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "loadtest_runs",
        sa.Column("id", sa.Integer, nullable=False, autoincrement=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("scenario", sa.String(16), nullable=False),
        sa.Column("target", sa.String(1024), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("duration_s", sa.Float(53), nullable=False),
        sa.Column("requests", sa.Integer, nullable=False),
        sa.Column("errors", sa.Integer, nullable=False),
        sa.Column("phases", sa.Text, nullable=False),
        sa.Column("config", sa.Text, nullable=False),
        sa.Column("warnings", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_loadtest_runs"),
    )
    op.create_index("ix_loadtest_runs_started_at", "loadtest_runs", ["started_at"])
    op.create_table(
        "loadtest_results",
        sa.Column("run_id", sa.Integer, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("phase", sa.Integer, nullable=False),
        sa.Column("sent_s", sa.Float(53), nullable=False),
        sa.Column("e2e_s", sa.Float(53), nullable=False),
        sa.Column("ttft_s", sa.Float(53), nullable=True),
        sa.Column("tpot_s", sa.Float(53), nullable=True),
        sa.Column("itl", sa.LargeBinary, nullable=False),
        sa.Column("input_tokens", sa.Integer, nullable=False),
        sa.Column("output_tokens", sa.Integer, nullable=False),
        sa.Column("status", sa.String(8), nullable=False),
        sa.Column("error", sa.String(256), nullable=False, server_default=""),
        sa.Column("trace_id", sa.String(32), nullable=False, server_default=""),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["loadtest_runs.id"],
            name="fk_loadtest_results_run_id_loadtest_runs",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "seq", name="pk_loadtest_results"),
    )


def downgrade() -> None:
    op.drop_table("loadtest_results")
    op.drop_index("ix_loadtest_runs_started_at", table_name="loadtest_runs")
    op.drop_table("loadtest_runs")
