"""The streaming client's timing and failure handling, over httpx.MockTransport."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import Callable

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from infersight.core.errors import InvalidInput
from infersight.core.loadtest import RequestResult
from infersight.loadgen.client import Endpoint, send
from tests.peers import serving_app


def sse(*events: object) -> bytes:
    lines = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events]
    return "".join(lines).encode()


def chunk(text: str | None = None, *, role: bool = False) -> dict[str, object]:
    delta: dict[str, object] = {} if text is None else {"content": text}
    if role:
        delta["role"] = "assistant"
    return {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def call(
    handler: Callable[[httpx.Request], httpx.Response], endpoint: Endpoint | None = None
) -> tuple[RequestResult, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    ticks = itertools.count()

    async def go() -> RequestResult:
        async with httpx.AsyncClient(transport=httpx.MockTransport(record)) as client:
            return await send(
                client,
                endpoint or Endpoint("http://server:8000/v1", "m"),
                "hello",
                input_tokens=7,
                max_tokens=10,
                seq=3,
                phase=1,
                t0=-5.0,
                clock=lambda: float(next(ticks)),  # one second per look at the clock
            )

    return asyncio.run(go()), seen


def test_timings_follow_the_content_chunks_and_the_usage_count() -> None:
    usage = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 10}}
    body = sse(chunk("", role=True), *(chunk(f" w{i}") for i in range(5)), chunk(), usage, "[DONE]")
    result, _ = call(lambda _r: httpx.Response(200, content=body))
    # Clock: 0 sent; 1 role; 2-6 content; 7 finish; 8 usage; 9 end.
    assert result.ok
    assert result.ttft_s == 2
    assert result.output_tokens == 10  # two tokens a chunk: the usage count wins
    assert result.tpot_s == pytest.approx(4 / 9)
    assert result.itl_s == (1, 1, 1, 1)
    assert result.e2e_s == 9
    assert result.sent_s == 5  # from the run's start
    assert (result.seq, result.phase, result.input_tokens) == (3, 1, 7)


def test_the_request_carries_trace_context_and_asks_for_a_stream() -> None:
    endpoint = Endpoint("http://server:8000/v1/", "llama", api_key="sk-1", chat=False)
    result, (request,) = call(lambda _r: httpx.Response(200, content=sse(chunk("x"))), endpoint)
    assert str(request.url) == "http://server:8000/v1/completions"
    traceparent = request.headers["traceparent"]
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", traceparent)
    assert traceparent.split("-")[1] == result.trace_id == request.headers["x-request-id"]
    assert request.headers["authorization"] == "Bearer sk-1"
    body = json.loads(request.content)
    assert body == {
        "model": "llama",
        "prompt": "hello",
        "max_tokens": 10,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }


@pytest.mark.parametrize(
    ("handler", "error"),
    [
        pytest.param(
            lambda _r: httpx.Response(503, json={"error": "overloaded"}),
            "HTTP 503",
            id="an error status",
        ),
        pytest.param(
            lambda _r: httpx.Response(200, content=sse(chunk("a"), {"error": {"code": 500}})),
            "'code': 500",
            id="an error inside the stream",
        ),
        pytest.param(
            lambda _r: httpx.Response(200, content=sse(chunk(role=True), "[DONE]")),
            "without any content",
            id="a stream with no content",
        ),
        pytest.param(
            lambda _r: httpx.Response(200, content=b"data: {not json\n\n"),
            "not JSON",
            id="a chunk that is not JSON",
        ),
        pytest.param(
            lambda r: (_ for _ in ()).throw(httpx.ConnectError("refused", request=r)),
            "ConnectError",
            id="a refused connection",
        ),
    ],
)
def test_failures_become_results_not_exceptions(handler, error) -> None:
    result, _ = call(handler)
    assert not result.ok
    assert error in result.error


def test_one_user_keeps_its_connection_from_request_to_request() -> None:
    ports: list[int] = []

    async def chat(request: Request) -> StreamingResponse:
        await request.body()
        ports.append(request.client.port if request.client else 0)
        body = sse(chunk("a"), chunk("b"), "[DONE]").decode()
        return StreamingResponse(iter([body]), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])

    async def three(url: str) -> list[RequestResult]:
        async with httpx.AsyncClient() as client:
            return [
                await send(
                    client,
                    Endpoint(url, "m"),
                    "hi",
                    input_tokens=1,
                    max_tokens=2,
                    seq=i,
                    phase=0,
                    t0=0.0,
                )
                for i in range(3)
            ]

    with serving_app(app) as url:
        results = asyncio.run(three(url))
    assert all(r.ok and r.output_tokens == 2 for r in results)
    assert len(ports) == 3
    assert len(set(ports)) == 1  # the stream was read to its end, so the connection was reused


def test_a_stored_target_carries_no_credentials() -> None:
    endpoint = Endpoint("https://user:secret@llm.example:8443/v1", "m")
    assert endpoint.display_url == "https://llm.example:8443/v1"


@pytest.mark.parametrize(
    ("url", "model"),
    [pytest.param("server:8000", "m", id="no scheme"), pytest.param("http://s", "", id="no model")],
)
def test_an_endpoint_needs_a_url_and_a_model(url: str, model: str) -> None:
    with pytest.raises(InvalidInput):
        Endpoint(url, model)


def test_the_api_key_never_shows_in_the_endpoints_repr():
    endpoint = Endpoint("http://127.0.0.1:1", "m", api_key="sk-secret-value-123")
    assert "sk-secret" not in repr(endpoint)
