"""The scraper: GET the server's ``/metrics`` with a timeout, detect the flavour once it is
known, and return normalised samples. Failures raise ``Unavailable`` with a ``reason`` that
the periodic task counts; they never touch trace ingest (it runs on its own thread)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import httpx

from collector.scrape import flavours
from collector.scrape.exposition import parse
from core.errors import InvalidInput, Unavailable
from core.samples import GpuSample, ServerSample


class Scraper:
    def __init__(
        self,
        url: str,
        instance: str,
        interval_s: float = 15.0,
        timeout_s: float = 5.0,
        client: httpx.Client | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        name: str = "scrape",
    ) -> None:
        self.url = url
        self.instance = instance
        self.interval_s = interval_s
        self.name = name
        self._client = client or httpx.Client(timeout=timeout_s)
        self._now = now
        self.flavour = ""
        self.model = ""

    def current_model(self) -> str:
        return self.model

    def sample(self) -> Sequence[GpuSample | ServerSample]:
        try:
            response = self._client.get(self.url, headers={"accept": "text/plain"})
        except httpx.TimeoutException:
            raise Unavailable("scrape timed out", details={"reason": "timeout"}) from None
        except httpx.HTTPError as exc:
            raise Unavailable(f"scrape failed: {exc}", details={"reason": "unreachable"}) from None
        if response.status_code != 200:
            raise Unavailable(
                f"scrape answered {response.status_code}", details={"reason": "http_status"}
            )
        try:
            exposition = parse(response.text, response.headers.get("content-type", ""))
        except InvalidInput:
            raise Unavailable("unparseable /metrics", details={"reason": "parse"}) from None
        self.flavour = flavours.detect(exposition)
        ts = self._now()
        if self.flavour == "dcgm":
            return flavours.gpu_samples(exposition, ts, self.instance)
        self.model = flavours.single_model(exposition)
        try:
            sample = flavours.server_sample(exposition, self.flavour, ts, self.instance)
        except InvalidInput as exc:  # InvalidRecord: absurd values on the server's side
            raise Unavailable(exc.message, details={"reason": "invalid_values"}) from None
        return [sample] if sample is not None else []

    def close(self) -> None:
        self._client.close()
