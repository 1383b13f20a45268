"""Per-engine server samples; good tokens kept per TTFT, TPOT and end-to-end limits.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

A server with data-parallel engines (vLLM's ``engine`` label, SGLang's ``dp_rank``) is stored
as one ``server_samples`` row for the instance, whose ratios are now the engines' mean
(``core.samples.combine_engines``), plus one ``server_engine_samples`` row per engine.
``server_samples.kv_cache_usage_max`` keeps the hottest engine's KV-cache usage. Rows stored
before this revision keep their figures and have no maximum (NULL): a sidecar cannot tell,
after the fact, which of its sums were a data-parallel server's.

``good_token_counts`` gains ``e2e_s`` in its key (good tokens are now measured against the
latency SLOs covering a series, which may limit end-to-end latency; 0 stands for no limit, as
for the other two). Kept counts stay valid: they were counted with no end-to-end limit. The
downgrade keeps only those.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infersight.storage.types import UTCDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

SERVER_FLOATS = (
    "requests_running",
    "requests_waiting",
    "requests_swapped",
    "kv_cache_usage",
    "prefix_cache_hit_ratio",
    "preemptions_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "requests_total",
    "request_errors_total",
)


_LABELS = ("model", "instance", "tenant", "priority")
_GOOD_KEY = ("ttft_s", "tpot_s", "resolution", "bucket", *_LABELS)


def upgrade() -> None:
    op.add_column("server_samples", sa.Column("kv_cache_usage_max", sa.Float(53), nullable=True))
    with op.batch_alter_table("good_token_counts") as batch:
        batch.add_column(sa.Column("e2e_s", sa.Float(53), nullable=False, server_default="0"))
        batch.drop_constraint("pk_good_token_counts", type_="primary")
        batch.create_primary_key(
            "pk_good_token_counts", ["ttft_s", "tpot_s", "e2e_s", *_GOOD_KEY[2:]]
        )
    op.create_table(
        "server_engine_samples",
        sa.Column("ts", UTCDateTime(), nullable=False),
        sa.Column("instance", sa.String(256), nullable=False),
        sa.Column("rank", sa.String(64), nullable=False),
        *(sa.Column(name, sa.Float(53), nullable=True) for name in SERVER_FLOATS),
        sa.PrimaryKeyConstraint("ts", "instance", "rank", name="pk_server_engine_samples"),
        postgresql_partition_by="RANGE (ts)",
    )
    op.create_index(
        "ix_server_engine_samples_instance_ts", "server_engine_samples", ["instance", "ts"]
    )


def downgrade() -> None:
    # Revision 0007 knows only pairs of positive TTFT and TPOT limits.
    op.execute("DELETE FROM good_token_counts WHERE e2e_s <> 0 OR ttft_s = 0 OR tpot_s = 0")
    with op.batch_alter_table("good_token_counts") as batch:
        batch.drop_constraint("pk_good_token_counts", type_="primary")
        batch.create_primary_key("pk_good_token_counts", list(_GOOD_KEY))
        batch.drop_column("e2e_s")
    # Dropping a partitioned parent drops its partitions with it.
    op.drop_table("server_engine_samples")
    op.drop_column("server_samples", "kv_cache_usage_max")
