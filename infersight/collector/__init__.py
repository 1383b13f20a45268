"""The sidecar collector: OTLP receivers, span → record mapping per engine, server /metrics
scraping, GPU sampling, a durable local spool and the shipper that drains it into the store.

It may import ``core`` and ``httpd`` only: the store writer is handed to the shipper as a
``core.write.Sink``; the CLI (``infersight``) wires it together.
"""
