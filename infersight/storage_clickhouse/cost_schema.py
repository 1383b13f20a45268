"""The ClickHouse table cost keeps (schema step 9; ``storage_clickhouse.cost`` writes and reads
it): ``good_token_counts``, the SQL store's table of the same name.

Which requests are good depends on limits an operator may change (the latency SLOs covering a
series, else the cost model's ``goodRequest``: ``core.goodput``), so good tokens cannot be
rolled up at ingest. Each closed hour and day is counted exactly from raw rows once per set of
limits, for the series held to them, and kept here keyed by the three limits (0 for none) with
the number of requests it was counted over, so that cost answers outlive the raw retention.
A kept bucket stands for its series while that number still equals the request rollups' count
(late data or an attribution move changes the rollups, and the bucket is counted again).

``ReplacingMergeTree(version)`` ordered by the limits, resolution, bucket and series (the
reads pin the limits and a bucket range): a bucket counted again replaces its row, and reads
use ``FINAL``. Kept for the day rollups' retention (``Layout.day_days``); sharded like the
request rollups (``cityHash64(model, instance)``) on a cluster.
"""

from __future__ import annotations

from typing import Final

from infersight.core.records import GROUP_LABELS
from infersight.storage_clickhouse.layout import Layout

_LABEL: Final = "LowCardinality(String)"
#: The limits columns (``GoodLimits.key``'s order) and the columns after the labels.
LIMIT_COLUMNS: Final = ("ttft_s", "tpot_s", "e2e_s")
#: Columns of ``good_token_counts`` in insert order.
GOOD_TOKEN_COLUMNS: Final = (
    *LIMIT_COLUMNS,
    "resolution",
    "bucket",
    *GROUP_LABELS,
    "requests",
    "good_tokens",
    "version",
)


def good_token_tables(layout: Layout) -> list[str]:
    """``good_token_counts`` (a ``schema.Step``'s statements)."""
    name = "good_token_counts"
    labels = ",\n    ".join(f"{label} {_LABEL}" for label in GROUP_LABELS)
    limits = ",\n    ".join(f"{c} Float64" for c in LIMIT_COLUMNS)
    engine = layout.engine("ReplacingMergeTree", name)
    engine = engine[:-1] + ("version)" if engine.endswith("()") else ", version)")
    order = ", ".join((*LIMIT_COLUMNS, "resolution", "bucket", *GROUP_LABELS))
    return [
        f"CREATE TABLE IF NOT EXISTS {layout.local(name)}{layout.on_cluster} (\n"
        f"    {limits},\n"
        f"    resolution {_LABEL},\n"
        "    bucket DateTime('UTC'),\n"
        f"    {labels},\n"
        "    requests UInt64,\n"
        "    good_tokens UInt64,\n"
        "    version UInt64\n"
        f") ENGINE = {engine}\n"
        "PARTITION BY toYYYYMM(bucket)\n"
        f"ORDER BY ({order})" + layout.ttl("bucket", layout.day_days) + layout.settings(),
        *layout.distributed(name),
    ]


__all__ = ["GOOD_TOKEN_COLUMNS", "LIMIT_COLUMNS", "good_token_tables"]
