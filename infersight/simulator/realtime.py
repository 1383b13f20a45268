"""Real-time mode: one simulated server behind an OpenAI-compatible streaming HTTP endpoint.

``/v1/chat/completions`` and ``/v1/completions`` (SSE ``data: {…}`` chunks, ``data: [DONE]``,
usage in a final chunk when ``stream_options.include_usage``), ``/v1/models``, ``/health``,
the server's vLLM-style ``/metrics`` and its GPUs' dcgm-exporter-style ``/dcgm/metrics``.
The same engine model as virtual time runs on the event loop against a monotonic clock: an
HTTP request becomes an arrival (alongside the scenario's own arrivals, when the engine has
them), and each token is released at the wall time of the engine step that produced it, so
TTFT and TPOT measured by a client follow the model.

Prompt length is estimated at four characters per token; a request generates exactly
``max_tokens`` tokens (``finish_reason: "length"``), so load tests control output length.
A W3C ``traceparent`` header makes the request's record carry the caller's trace id, and its
span a child of the caller's span.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from prometheus_client import generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from infersight.simulator.engine import InstanceSim
from infersight.simulator.events import Completion
from infersight.simulator.faults import Fault, FaultSchedule
from infersight.simulator.hostlimits import HostLimits
from infersight.simulator.profiles import ModelProfile
from infersight.simulator.sinks import Sink
from infersight.simulator.sinks.prometheus import MetricsSink
from infersight.simulator.workload import Arrival

DEFAULT_MAX_TOKENS = 256
CHARS_PER_TOKEN = 4
#: How often an idle driver looks at the clock (samples are taken then, too).
_IDLE_POLL_S = 0.25


class _Stream:
    """Receives one request's token times and its completion from the engine."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[float | Completion] = asyncio.Queue()

    def on_token(self, t: float) -> None:
        self.queue.put_nowait(t)

    def on_finish(self, completion: Completion) -> None:
        self.queue.put_nowait(completion)


def trace_id(traceparent: str) -> str:
    """The trace id of a W3C ``traceparent`` header, or ``""`` (vLLM's spans join the caller's
    trace the same way, so a client can find its requests among the server's records)."""
    return trace_context(traceparent)[0]


def trace_context(traceparent: str) -> tuple[str, str]:
    """``(trace id, parent span id)`` of a W3C ``traceparent`` header, or ``("", "")``: the
    server's span joins the caller's trace as a child of the caller's span, as vLLM's does."""
    parts = traceparent.strip().lower().split("-")
    if len(parts) < 4 or len(parts[0]) != 2 or parts[0] == "ff":
        return "", ""
    trace, parent = parts[1], parts[2]
    if len(trace) != 32 or trace == "0" * 32 or not all(c in _HEX for c in trace):
        return "", ""
    if len(parent) != 16 or parent == "0" * 16 or not all(c in _HEX for c in parent):
        return "", ""
    return trace, parent


_HEX = frozenset("0123456789abcdef")


def _content_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or an array of content parts.

    Clients such as GuideLLM send ``[{"type": "text", "text": …}]``; counting that array's
    ``str()`` would add its brackets and keys (≈ 8 tokens a message) to the prompt. Only text
    parts count; other parts (images, audio) carry no text tokens here.
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type", "text") == "text"
        )
    return "" if content is None else str(content)


def prompt_text(body: dict[str, Any]) -> str:
    """The prompt's text (a chat's messages' text parts, or the completion's prompt)."""
    if "messages" in body:
        text = "".join(
            _content_text(m.get("content")) for m in body["messages"] if isinstance(m, dict)
        )
    else:
        prompt = body.get("prompt", "")
        text = "".join(map(str, prompt)) if isinstance(prompt, list) else str(prompt)
    return text


def prompt_tokens(body: dict[str, Any]) -> int:
    return max(1, math.ceil(len(prompt_text(body)) / CHARS_PER_TOKEN))


class RealtimeServer:
    """An instance's engine driven by the wall clock, plus its HTTP app."""

    def __init__(
        self,
        sim: InstanceSim,
        *,
        clock: Callable[[], float] = time.monotonic,
        sinks: Sequence[Sink] = (),
        close_sinks: bool = True,
        served_model_name: str | None = None,
        keep_completions: int = 100_000,
        host_limits: HostLimits | None = None,
    ) -> None:
        self.sim = sim
        #: Real host-side limits of this process (``simulator.hostlimits``), if any.
        self.host_limits = host_limits
        self.name = sim.name
        self.model = served_model_name or sim.model
        self.metrics = MetricsSink()
        self._sinks = [self.metrics, *sinks]
        self._close_sinks = close_sinks
        self._clock = clock
        self._t0 = clock()
        self._epoch = sim.epoch
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: The latest finished requests (for tests and load-test cross-checks), bounded so a
        #: long-running server does not grow without limit; ``served`` counts them all.
        self.completions: deque[Completion] = deque(maxlen=keep_completions)
        self.served = 0

    @classmethod
    def standalone(
        cls,
        name: str,
        profile: ModelProfile,
        *,
        epoch: datetime,
        faults: Sequence[Fault] = (),
        sample_interval_s: float = 1.0,
        seed: int = 0,
        **kwargs: Any,
    ) -> RealtimeServer:
        """A server whose only traffic is what its HTTP clients send."""
        sim = InstanceSim(
            name,
            profile,
            epoch=epoch,
            rng=np.random.default_rng(seed),
            faults=FaultSchedule(faults),
            sample_interval_s=sample_interval_s,
        )
        return cls(sim, **kwargs)

    def now(self) -> float:
        return self._clock() - self._t0

    # -- the driver ---------------------------------------------------------------------

    async def _drive(self) -> None:
        while True:
            self.sim.advance_to(self.now())
            batch = self.sim.drain()
            if len(batch):
                self.completions.extend(batch.completions)
                self.served += len(batch.completions)
                for sink in self._sinks:
                    sink.write(batch)
            delay = self.sim.next_event() - self.now()
            self._wake.clear()
            if delay > 0:
                timeout = min(delay, _IDLE_POLL_S)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
            else:
                await asyncio.sleep(0)

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        self._t0 = self._clock()
        self._task = asyncio.create_task(self._drive())
        if self.host_limits:
            self.host_limits.start()
        try:
            yield
        finally:
            if self.host_limits:
                self.host_limits.stop()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            if self._close_sinks:
                for sink in self._sinks:
                    sink.close()

    # -- HTTP ---------------------------------------------------------------------------

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/completions", self._completions, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/health", self._health, methods=["GET"]),
                Route("/metrics", self._metrics, methods=["GET"]),
                Route("/dcgm/metrics", self._dcgm, methods=["GET"]),
            ],
            lifespan=self.lifespan,
        )

    async def _health(self, _request: Request) -> Response:
        return PlainTextResponse("")

    async def _metrics(self, _request: Request) -> Response:
        registry = self.metrics.vllm_registry(self.name, self.model)
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4")

    async def _dcgm(self, _request: Request) -> Response:
        registry = self.metrics.dcgm_registry(self.name)
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4")

    async def _models(self, _request: Request) -> Response:
        card = {"id": self.model, "object": "model", "owned_by": "vllm", "root": self.model}
        return JSONResponse({"object": "list", "data": [card]})

    async def _chat(self, request: Request) -> Response:
        return await self._serve(request, chat=True)

    async def _completions(self, request: Request) -> Response:
        return await self._serve(request, chat=False)

    async def _serve(self, request: Request, *, chat: bool) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body is not JSON", "BadRequestError")
        parsed = _parse(body, self.model, self.sim.profile.max_model_len)
        if isinstance(parsed, Response):
            return parsed
        max_tokens, temperature, top_p = parsed
        stream = _Stream()
        now = self.now()
        caller_trace, caller_span = trace_context(request.headers.get("traceparent", ""))
        self.sim.submit(
            Arrival(
                now,
                prompt_tokens(body),
                max_tokens,
                max_tokens,
                "",
                "",
                trace_id=caller_trace,
                parent_span_id=caller_span,
            ),
            listener=stream,
            temperature=temperature,
            top_p=top_p,
        )
        self._wake.set()
        ident = ("chatcmpl-" if chat else "cmpl-") + f"{self.sim.requests_total:08x}{id(stream):x}"
        if self.host_limits:
            self.host_limits.on_request(ident, prompt_text(body))
        created = int(self._epoch.timestamp() + now)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = self._chunks(stream, ident, created, chat=chat, usage=include_usage)
            return StreamingResponse(chunks, media_type="text/event-stream")
        return JSONResponse(await self._whole(stream, ident, created, chat=chat))

    async def _tokens(self, stream: _Stream) -> AsyncIterator[float | Completion]:
        """Token times (released at their wall time), then the completion."""
        while True:
            item = await stream.queue.get()
            if isinstance(item, Completion):
                yield item
                return
            delay = item - self.now()
            if delay > 0:
                await asyncio.sleep(delay)
            yield item

    async def _chunks(
        self, stream: _Stream, ident: str, created: int, *, chat: bool, usage: bool
    ) -> AsyncIterator[str]:
        head = {"id": ident, "created": created, "model": self.model}
        head["object"] = "chat.completion.chunk" if chat else "text_completion"
        n = 0
        async for item in self._tokens(stream):
            if isinstance(item, Completion):
                yield _sse(head | {"choices": [_choice(chat, None, item.record.finish_reason)]})
                if usage:
                    yield _sse(head | {"choices": [], "usage": _usage(item)})
                break
            if chat and n == 0:
                first = _choice(chat, "", None)
                first["delta"]["role"] = "assistant"
                yield _sse(head | {"choices": [first]})
            yield _sse(head | {"choices": [_choice(chat, _word(n), None)]})
            if self.host_limits:
                self.host_limits.on_token(ident, n)
            n += 1
        yield "data: [DONE]\n\n"

    async def _whole(self, stream: _Stream, ident: str, created: int, *, chat: bool) -> Any:
        words: list[str] = []
        async for item in self._tokens(stream):
            if isinstance(item, Completion):
                text = "".join(words)
                if chat:
                    choice: dict[str, Any] = {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": item.record.finish_reason,
                    }
                else:
                    choice = {"index": 0, "text": text, "finish_reason": item.record.finish_reason}
                return {
                    "id": ident,
                    "object": "chat.completion" if chat else "text_completion",
                    "created": created,
                    "model": self.model,
                    "choices": [choice],
                    "usage": _usage(item),
                }
            words.append(_word(len(words)))
        raise AssertionError("a stream ends with its completion")  # pragma: no cover


def _parse(body: Any, model: str, max_len: int) -> tuple[int, float, float] | Response:
    """``(max_tokens, temperature, top_p)`` of a request body, or the error to answer."""
    if not isinstance(body, dict):
        return _error(400, "request body must be a JSON object", "BadRequestError")
    if body.get("model") not in (None, model):
        return _error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
    try:
        max_tokens = int(
            body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
        )
        temperature = float(body.get("temperature", 1.0))
        top_p = float(body.get("top_p", 1.0))
    except (TypeError, ValueError):
        return _error(400, "max_tokens, temperature and top_p must be numbers", "BadRequestError")
    if not 1 <= max_tokens <= max_len:
        return _error(400, "max_tokens out of range", "BadRequestError")
    return max_tokens, temperature, top_p


def _word(i: int) -> str:
    return f" w{i}"


def _choice(chat: bool, text: str | None, finish: str | None) -> dict[str, Any]:
    if chat:
        delta = {} if text is None else {"content": text}
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}


def _usage(c: Completion) -> dict[str, int]:
    prompt, completion = c.record.input_tokens or 0, c.record.output_tokens or 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def _error(status: int, message: str, kind: str) -> Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return JSONResponse(body, status_code=status)
