"""Telemetry in ClickHouse behind the store seam (issue #36).

``service.store.open_store`` builds a ``hybrid.HybridStore`` when the settings name a telemetry
URL (``INFERSIGHT_TELEMETRY_URL``): the telemetry (requests, prefill legs, gateway and client
spans, client records, late sequences, server scrapes, GPU samples and their rollups, good-token
counts) is written to ClickHouse (and to the SQL store too with
``INFERSIGHT_TELEMETRY_SQL_COPY``, one acknowledgement for both), every telemetry read is
answered from ClickHouse, and the state concerns are the SQL store's.
docs/past-one-primary.md ("Supported topology") says how.

Modules: ``transport`` (ClickHouse over HTTP with clickhouse-connect, or chdb in process),
``layout`` (where tables go), ``schema`` with ``samples_schema`` and ``attribution_schema``
(versioned migrations, single-node and cluster DDL), ``writer`` (the request sink),
``samples`` (scrapes and GPU samples), ``gpu_rollups`` with ``gpu_rollups_schema``,
``attribution`` (spans and moves), ``clients`` (client records), ``sequences`` (late
sequences folded), ``reads``, ``pools``, ``signals``, ``capacity``, ``baselines`` and ``cost``
(the read queries; ``cost_schema``: good-token counts), ``hybrid`` (the store). This package
imports ``core`` and ``storage.seam`` only; only ``service.store`` imports it (import-linter
contracts).
"""
