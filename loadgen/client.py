"""One streamed request to an OpenAI-compatible endpoint, timed token by token on the client.

The request asks for ``stream: true`` with usage in the last chunk and carries a W3C
``traceparent`` (and the same id as ``X-Request-Id``): servers that trace, as vLLM does, put
the request's span into that trace, so a run's results join the server's records by trace id.
TTFT is send → first chunk with content; TPOT is first → last content chunk ÷ (tokens − 1),
the engine's definition, with the token count from the usage chunk when the server sends one
(a chunk may carry several tokens); ITL are the gaps between content chunks; E2E ends at
``data: [DONE]`` (the rest of the body is still read, so the connection goes back to the pool
instead of being closed: a new TCP or TLS handshake would land in the next request's TTFT).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Final

import httpx

from core.errors import InvalidInput
from core.loadtest import RequestResult

MAX_ERROR_CHARS: Final = 200


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


@dataclass
class _Timing:
    tokens: list[float]
    usage_tokens: int | None = None
    error: str = ""
    #: When ``[DONE]`` arrived: the end of the request, though the body is still read out.
    done: float | None = None


def _content(event: dict[str, Any]) -> str:
    choices = event.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    choice = choices[0]
    delta = choice.get("delta")
    text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    return text if isinstance(text, str) else ""


def _read_event(data: str, timing: _Timing, now: float) -> None:
    try:
        event = json.loads(data)
    except ValueError:
        timing.error = "the server sent a chunk that is not JSON"
        return
    if not isinstance(event, dict):
        return
    if "error" in event:  # vLLM reports a failure inside the stream
        timing.error = str(event["error"])[:MAX_ERROR_CHARS]
        return
    if _content(event):
        timing.tokens.append(now)
    usage = event.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        timing.usage_tokens = usage["completion_tokens"]


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
) -> RequestResult:
    """Send one request and time it; failures become results with ``ok=False``."""
    trace_id = secrets.token_hex(16)
    timing = _Timing(tokens=[])
    sent = clock()
    try:
        body, headers = endpoint.body(prompt, max_tokens), endpoint.headers(trace_id)
        async with client.stream("POST", endpoint.url, json=body, headers=headers) as response:
            if response.status_code != httpx.codes.OK:
                text = (await response.aread()).decode("utf-8", "replace")
                timing.error = f"HTTP {response.status_code}: {text[:MAX_ERROR_CHARS]}"
            else:
                async for line in response.aiter_lines():
                    if not line.startswith("data:") or timing.done is not None:
                        continue  # read to the end all the same: the connection is reused
                    data = line[5:].strip()
                    if data == "[DONE]":
                        timing.done = clock()
                        continue
                    _read_event(data, timing, clock())
    except httpx.HTTPError as exc:
        timing.error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
    end = timing.done if timing.done is not None and not timing.error else clock()
    return _result(timing, seq, phase, sent - t0, end - sent, sent, input_tokens, trace_id)


def _result(
    timing: _Timing,
    seq: int,
    phase: int,
    sent_s: float,
    e2e: float,
    sent: float,
    input_tokens: int,
    trace_id: str,
) -> RequestResult:
    tokens = timing.tokens
    if not timing.error and not tokens:
        timing.error = "the stream ended without any content"
    out = timing.usage_tokens if timing.usage_tokens is not None else len(tokens)
    ttft = tokens[0] - sent if tokens else None
    tpot = (tokens[-1] - tokens[0]) / (out - 1) if tokens and out > 1 else None
    return RequestResult(
        seq=seq,
        phase=phase,
        sent_s=sent_s,
        e2e_s=e2e,
        ttft_s=ttft,
        tpot_s=tpot,
        itl_s=tuple(b - a for a, b in pairwise(tokens)),
        input_tokens=input_tokens,
        output_tokens=out,
        ok=not timing.error,
        error=timing.error,
        trace_id=trace_id,
    )
