"""The sidecar collector: OTLP receivers, span → record mapping per engine, server /metrics
scraping, GPU sampling, a durable local spool and the shipper that drains it into the store.

It may import ``core`` and ``storage`` only; the CLI (``infersight``) wires it together.
"""
