"""The ClickHouse table of client records (issue #36, schema step 10): ``client_requests``, one
row per call an instrumented client (or a load tester sending a ``traceparent``) measured
(``core.client.ClientRecord``), the SQL store's ``client_requests``.

* ``ReplacingMergeTree`` ordered ``(model, start, trace_id, span_id)``: the read
  (``storage_clickhouse.clients``) takes a window's calls newest first, of one model (its
  aliases: a few names) or of all, and the key ends in the SQL store's key
  ``(start, trace_id, span_id)``, so that a row written twice is one row after merges (a record
  keeps its model, so the model in front changes no key). The writer stores each key once; the
  read uses ``FINAL``, right even before a merge should two writers race on one key.
* Partitioned by day, with the raw retention as ``TTL`` (``Layout.raw_days``, as
  ``requests``): an expired day goes as whole parts.
* On a cluster: ``client_requests_local`` (``ReplicatedReplacingMergeTree``) on every node under
  a ``Distributed`` table sharded by ``cityHash64(trace_id)`` (the ``attributions``' key). A
  client record names no instance, and sharding by model would put a busy model's every call on
  one shard; by trace the calls spread evenly and a trace's calls (an agent's loop) stay
  together. The join to the server's records is by trace id across shards either way
  (``requests`` is sharded by series), in batches of trace ids (``clients``).
"""

from __future__ import annotations

from typing import Final

from infersight.core.client import CLIENT_FIELDS
from infersight.storage_clickhouse.layout import Layout
from infersight.storage_clickhouse.transport import quote

#: The sharding key of ``client_requests`` on a cluster.
CLIENTS_SHARDING_KEY: Final = "cityHash64(trace_id)"
#: Columns of ``client_requests`` in insert order (``ClientRecord``'s fields).
CLIENT_COLUMNS: Final = CLIENT_FIELDS

_LABEL: Final = "LowCardinality(String)"
_TYPES: Final = {
    "start": "DateTime64(6, 'UTC')",
    "trace_id": "String",
    "span_id": "String",
    "e2e_s": "Nullable(Float64)",
    "ttft_s": "Nullable(Float64)",
    "input_tokens": "Nullable(UInt32)",
    "output_tokens": "Nullable(UInt32)",
}


def client_tables(layout: Layout) -> list[str]:
    """``client_requests`` (a ``schema.Step``'s statements; the module says why so)."""
    name = "client_requests"
    order = ("start", *(c for c in CLIENT_COLUMNS if c != "start"))
    columns = ",\n    ".join(f"{c} {_TYPES.get(c, _LABEL)}" for c in order)
    out = [
        f"CREATE TABLE IF NOT EXISTS {layout.local(name)}{layout.on_cluster} (\n"
        f"    {columns}\n"
        f") ENGINE = {layout.engine('ReplacingMergeTree', name)}\n"
        "PARTITION BY toDate(start)\n"
        "ORDER BY (model, start, trace_id, span_id)"
        + layout.ttl("toDateTime(start)", layout.raw_days)
        + layout.settings()
    ]
    if layout.cluster:
        out.append(
            f"CREATE TABLE IF NOT EXISTS {layout.table(name)}{layout.on_cluster}"
            f" AS {layout.local(name)} ENGINE = Distributed({quote(layout.cluster)},"
            f" {quote(layout.database)}, {quote(name + '_local')}, {CLIENTS_SHARDING_KEY})"
        )
    return out


__all__ = ["CLIENTS_SHARDING_KEY", "CLIENT_COLUMNS", "client_tables"]
