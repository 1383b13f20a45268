"""The scraper: GET the server's ``/metrics`` with a timeout, detect its dialect (declared in
``collector.engines``), and return normalised samples. Failures raise ``Unavailable`` with a
``reason`` that the periodic task counts; they never touch trace ingest (it runs on its own
thread).

The scraper keeps the previous scrape's sample: ratios of counters (prefix-cache hits over
queries, accepted over draft tokens) are taken over the interval between two scrapes
(``core.samples.with_interval_ratios``), never since the server started.

The fetch uses the standard library's ``urllib``: a sidecar scrapes one local endpoint, and
an HTTP client library (with its TLS context built eagerly) would cost megabytes of RSS.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from infersight.collector import engines
from infersight.collector.scrape import flavours
from infersight.collector.scrape.exposition import parse
from infersight.core.errors import ConfigurationError, InvalidInput, Unavailable
from infersight.core.records import MAX_LABEL_LEN
from infersight.core.samples import GpuSample, ServerSample, with_interval_ratios

#: LoRA adapter names kept per scraped server (the first ones seen; vLLM's ``max_loras``
#: bounds how many run at once, this bounds how many a sidecar remembers).
MAX_ADAPTERS = 256


class Scraper:
    def __init__(
        self,
        url: str,
        instance: str,
        interval_s: float = 15.0,
        timeout_s: float = 5.0,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        name: str = "scrape",
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError("the scrape URL must be http(s)", details={"url": url})
        self.url = url
        self.instance = instance
        self.interval_s = interval_s
        self.name = name
        self.timeout_s = timeout_s
        self._now = now
        self.flavour = ""
        self.model = ""
        self._previous: ServerSample | None = None
        #: LoRA adapters the server named so far (running or waiting), accumulated: an
        #: adapter's requests may arrive after it left the server's lists.
        self.adapters: frozenset[str] = frozenset()
        #: What the last scrape said the server's part in disaggregated serving is
        #: (``flavours.server_role``; ``role`` ``None``: it said none).
        self.role = flavours.ServerRole(None, "")

    def current_model(self) -> str:
        return self.model

    def current_adapters(self) -> frozenset[str]:
        """The adapters seen so far (a set rebuilt only when one is new: read per span)."""
        return self.adapters

    def _learn_adapters(self, names: set[str]) -> None:
        new = {n[:MAX_LABEL_LEN] for n in names} - self.adapters
        room = MAX_ADAPTERS - len(self.adapters)
        if new and room > 0:
            self.adapters = self.adapters | frozenset(sorted(new)[:room])

    def sample(self) -> Sequence[GpuSample | ServerSample]:
        text, content_type = self._fetch()
        try:
            exposition = parse(text, content_type)
        except InvalidInput:
            raise Unavailable("unparseable /metrics", details={"reason": "parse"}) from None
        dialect = engines.detect(exposition)
        self.flavour = engines.UNRECOGNISED if dialect is None else dialect.name
        ts = self._now()
        if dialect is not None and dialect.yields_gpus:
            return flavours.gpu_samples(exposition, ts, self.instance)
        self.role = flavours.server_role(exposition)
        self.model = flavours.single_model(exposition)
        if dialect is None:
            return []
        if dialect.adapters is not None:
            self._learn_adapters(dialect.adapters(exposition))
        try:
            sample = flavours.server_sample(exposition, dialect, ts, self.instance)
        except InvalidInput as exc:  # InvalidRecord: absurd values on the server's side
            raise Unavailable(exc.message, details={"reason": "invalid_values"}) from None
        if sample is None:
            return []
        previous, self._previous = self._previous, sample
        if previous is not None and previous.engine != sample.engine:
            previous = None  # another server answers at this address now
        try:
            return [with_interval_ratios(sample, previous)]
        except InvalidInput as exc:
            raise Unavailable(exc.message, details={"reason": "invalid_values"}) from None

    def _fetch(self) -> tuple[str, str]:
        request = urllib.request.Request(self.url, headers={"Accept": "text/plain"})  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310
                body = response.read()
                content_type = response.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            raise Unavailable(
                f"scrape answered {exc.code}", details={"reason": "http_status"}
            ) from None
        except TimeoutError:
            raise Unavailable("scrape timed out", details={"reason": "timeout"}) from None
        except urllib.error.URLError as exc:
            reason = "timeout" if isinstance(exc.reason, TimeoutError) else "unreachable"
            raise Unavailable(f"scrape failed: {exc.reason}", details={"reason": reason}) from None
        except OSError as exc:
            raise Unavailable(f"scrape failed: {exc}", details={"reason": "unreachable"}) from None
        charset = "utf-8"
        if "charset=" in content_type:
            charset = content_type.split("charset=", 1)[1].split(";", 1)[0].strip() or charset
        return body.decode(charset, errors="replace"), content_type

    def close(self) -> None:
        """Nothing is held between scrapes."""
