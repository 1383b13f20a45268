"""Telemetry in ClickHouse behind the store seam (issue #36).

``service.store.open_store`` builds a ``hybrid.HybridStore`` when the settings name a telemetry
URL (``INFERSIGHT_TELEMETRY_URL``): requests, prefill legs, server scrapes, GPU samples (with
their rollups) and gateway spans are written to ClickHouse *and* to the SQL store (one
acknowledgement for both), most telemetry reads are answered from ClickHouse, and the state
concerns are the SQL store's. docs/past-one-primary.md ("Supported topology") says which reads
moved and what is left.

Modules: ``transport`` (ClickHouse over HTTP with clickhouse-connect, or chdb in process),
``layout`` (where tables go), ``schema`` with ``samples_schema`` and ``attribution_schema``
(versioned migrations, single-node and cluster DDL), ``writer`` (the request sink),
``samples`` (scrapes and GPU samples), ``gpu_rollups`` with ``gpu_rollups_schema``,
``attribution`` (spans and moves), ``reads`` and
``pools`` (the read queries), ``hybrid`` (the store). This package imports ``core`` and
``storage.seam`` only; only ``service.store`` imports it (import-linter contracts).
"""
