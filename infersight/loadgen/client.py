"""One streamed request to an OpenAI-compatible endpoint, timed token by token on the client.

The request asks for ``stream: true`` with usage in the last chunk and carries a W3C
``traceparent`` (and the same id as ``X-Request-Id``): servers that trace, as vLLM does, put
the request's span into that trace, so a run's results join the server's records by trace id.
The timings are ``core.streaming``'s (TTFT, TPOT, ITL, E2E: one definition for this client
and the Locust user); the body is read to its end after ``data: [DONE]``, so the connection
goes back to the pool instead of being closed: a new TCP or TLS handshake would land in the
next request's TTFT.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from infersight.core.errors import InvalidInput
from infersight.core.loadtest import RequestResult
from infersight.core.streaming import StreamTiming


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to send: base URL (``http://host:port``), model, chat or completions."""

    base_url: str
    model: str
    chat: bool = True
    api_key: str = field(default="", repr=False)  # never in a log line or a traceback
    ignore_eos: bool = True

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise InvalidInput("the target URL must start with http:// or https://")
        if not self.model:
            raise InvalidInput("a load test needs the served model's name")

    @property
    def display_url(self) -> str:
        """The base URL without any credentials in it (what a stored run records)."""
        return str(httpx.URL(self.base_url).copy_with(username=None, password=None))

    @property
    def url(self) -> str:
        root = self.base_url.rstrip("/")
        root = root.removesuffix("/v1")
        return root + ("/v1/chat/completions" if self.chat else "/v1/completions")

    def body(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.ignore_eos:  # vLLM's extension: generate exactly max_tokens
            body["ignore_eos"] = True
        if self.chat:
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body

    def headers(self, trace_id: str) -> dict[str, str]:
        headers = {
            "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01",
            "x-request-id": trace_id,
        }
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        return headers


async def send(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    prompt: str,
    *,
    input_tokens: int,
    max_tokens: int,
    seq: int,
    phase: int,
    t0: float,
    clock: Callable[[], float] = time.perf_counter,
    sent: float | None = None,
) -> RequestResult:
    """Send one request and time it; failures become results with ``ok=False``. ``sent``:
    the clock's reading when the caller decided to send it (default: now)."""
    trace_id = secrets.token_hex(16)
    timing = StreamTiming()
    sent = clock() if sent is None else sent
    try:
        body, headers = endpoint.body(prompt, max_tokens), endpoint.headers(trace_id)
        async with client.stream("POST", endpoint.url, json=body, headers=headers) as response:
            if response.status_code != httpx.codes.OK:
                text = (await response.aread()).decode("utf-8", "replace")
                timing.fail(f"HTTP {response.status_code}: {text}")
            else:
                async for line in response.aiter_lines():
                    timing.feed(line, clock)  # read to the end: the connection is reused
    except httpx.HTTPError as exc:
        timing.fail(f"{type(exc).__name__}: {exc}")
    return timing.result(
        seq=seq,
        phase=phase,
        sent_s=sent - t0,
        sent=sent,
        end=timing.end(clock()),
        input_tokens=input_tokens,
        trace_id=trace_id,
    )


def send_sync(
    client: httpx.Client,
    endpoint: Endpoint,
    prompt: str,
    *,
    input_tokens: int,
    max_tokens: int,
    clock: Callable[[], float] = time.perf_counter,
    wall_clock: Callable[[], float] = time.time,
) -> tuple[float, RequestResult]:
    """``send`` on a blocking client (the Locust user's: gevent makes it cooperative).

    The same request, the same line-by-line reading and the same ``core.streaming`` timing;
    returns the wall-clock send time with the result (``seq``, ``phase`` and ``sent_s`` are
    set when the workers' results are merged: only the master knows the run's start).
    """
    trace_id = secrets.token_hex(16)
    timing = StreamTiming()
    sent_epoch, sent = wall_clock(), clock()
    try:
        body, headers = endpoint.body(prompt, max_tokens), endpoint.headers(trace_id)
        with client.stream("POST", endpoint.url, json=body, headers=headers) as response:
            if response.status_code != httpx.codes.OK:
                text = response.read().decode("utf-8", "replace")
                timing.fail(f"HTTP {response.status_code}: {text}")
            else:
                for line in response.iter_lines():
                    timing.feed(line, clock)  # read to the end: the connection is reused
    except httpx.HTTPError as exc:
        timing.fail(f"{type(exc).__name__}: {exc}")
    result = timing.result(
        seq=0,
        phase=0,
        sent_s=0.0,
        sent=sent,
        end=timing.end(clock()),
        input_tokens=input_tokens,
        trace_id=trace_id,
    )
    return sent_epoch, result
