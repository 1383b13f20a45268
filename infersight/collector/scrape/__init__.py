"""Scraping an inference server's (or dcgm-exporter's) ``/metrics`` into ``ServerSample`` /
``GpuSample``: ``exposition`` parses, ``flavours`` normalises, ``scraper`` fetches."""
