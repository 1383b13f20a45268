"""GPU-sample rollups and kept good-token counts.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30

``gpu_rollups`` holds one row per (resolution, bucket, instance, GPU): per-sample sums for
means, throttle counts, and the seconds the samples cover with their utilisation histogram and
energy (``storage.gpu_rollup``). ``good_token_counts`` keeps good tokens per hour and day and
series for a pair of latency limits (``storage.good_tokens``). GPU samples already stored are
rolled up (``storage.gpu_rollup.rebuild``; nothing to do on a new store).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage import gpu_rollup
from infersight.storage.types import UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_MEANS = (
    "util_gpu",
    "memory_used_bytes",
    "memory_total_bytes",
    "power_w",
    "power_limit_w",
    "temperature_c",
    "sm_clock_mhz",
)
_REASONS = (
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)
_LABELS = ("model", "instance", "tenant", "priority")


def _float(name: str) -> sa.Column[float]:
    return sa.Column(name, sa.Float(53), nullable=False, server_default="0")


def _count(name: str) -> sa.Column[int]:
    return sa.Column(name, sa.BigInteger, nullable=False, server_default="0")


def upgrade() -> None:
    op.create_table(
        "gpu_rollups",
        sa.Column("resolution", sa.String(2), nullable=False),
        sa.Column("bucket", UTCDateTime(), nullable=False),
        sa.Column("instance", sa.String(256), nullable=False),
        sa.Column("gpu_index", sa.SmallInteger, nullable=False),
        sa.Column("name", sa.String(256), nullable=False, server_default=""),
        _count("samples"),
        *(c for f in _MEANS for c in (_float(f"{f}_sum"), _count(f"{f}_n"))),
        _count("throttled_samples"),
        *(_count(f"reason_{r}") for r in _REASONS),
        sa.Column("ecc_sbe_max", sa.Float(53), nullable=True),
        sa.Column("ecc_dbe_max", sa.Float(53), nullable=True),
        sa.Column("xid_max", sa.Integer, nullable=True),
        _float("covered_s"),
        _float("util_s"),
        _float("util_weighted_s"),
        _float("energy_j"),
        _float("throttled_s"),
        *(_float(f"util_bin_{k:02d}") for k in range(21)),
        sa.PrimaryKeyConstraint(
            "resolution", "bucket", "instance", "gpu_index", name="pk_gpu_rollups"
        ),
    )
    op.create_table(
        "good_token_counts",
        sa.Column("ttft_s", sa.Float(53), nullable=False),
        sa.Column("tpot_s", sa.Float(53), nullable=False),
        sa.Column("resolution", sa.String(2), nullable=False),
        sa.Column("bucket", UTCDateTime(), nullable=False),
        *(sa.Column(name, sa.String(256), nullable=False) for name in _LABELS),
        sa.Column("requests", sa.BigInteger, nullable=False),
        sa.Column("good_tokens", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint(
            "ttft_s", "tpot_s", "resolution", "bucket", *_LABELS, name="pk_good_token_counts"
        ),
    )
    gpu_rollup.rebuild(op.get_bind())


def downgrade() -> None:
    op.drop_table("good_token_counts")
    op.drop_table("gpu_rollups")
