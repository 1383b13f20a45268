"""Telemetry in ClickHouse behind the store seam (issue #36): a first slice.

``service.store.open_store`` builds a ``hybrid.HybridStore`` when the settings name a telemetry
URL (``INFERSIGHT_TELEMETRY_URL``): request records are written to ClickHouse *and* to the SQL
store (one acknowledgement for both), latency quantiles (exact and from sketches), throughput
and the data's span are read from ClickHouse, and every other concern is the SQL store's.
docs/past-one-primary.md ("Supported topology (first slice)") says what is left.

Modules: ``transport`` (ClickHouse over HTTP with clickhouse-connect, or chdb in process),
``schema`` (versioned migrations, single-node and cluster DDL), ``writer`` (the request sink),
``reads`` (the read queries), ``hybrid`` (the store). This package imports ``core`` and
``storage.seam`` only; only ``service.store`` imports it (import-linter contracts).
"""
