"""The OpenAI-compatible streaming endpoint, measured with a real HTTP client (httpx)."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from infersight.simulator.profiles import ModelProfile
from infersight.simulator.realtime import RealtimeServer
from tests.peers import serving_app
from tests.simulator.support import START
from tests.virtual_time import run_in_virtual_time, serving_here


def serving(server: RealtimeServer) -> AbstractContextManager[str]:
    return serving_app(server.app())


@pytest.fixture
def server(profile_8b: ModelProfile) -> RealtimeServer:
    return RealtimeServer.standalone("rt-0", profile_8b, epoch=START, sample_interval_s=0.5)


@dataclass
class Measured:
    ttft: float
    tpot: float
    tokens: int
    events: list[Any]


class _Reader:
    """Collects one stream's SSE events and the times its content chunks arrived."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.sent = now()
        self.events: list[Any] = []
        self.token_times: list[float] = []

    def check(self, response: httpx.Response) -> None:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")

    def line(self, line: str) -> None:
        if not line.startswith("data: "):
            return
        data = line.removeprefix("data: ")
        self.events.append(data if data == "[DONE]" else json.loads(data))
        if data != "[DONE]" and _text(self.events[-1]):
            self.token_times.append(self.now())

    def measured(self) -> Measured:
        times, n = self.token_times, len(self.token_times)
        return Measured(
            ttft=times[0] - self.sent,
            tpot=(times[-1] - times[0]) / (n - 1),
            tokens=n,
            events=self.events,
        )


def stream(base: str, path: str, body: dict[str, Any]) -> Measured:
    with httpx.Client(timeout=30) as client:
        reader = _Reader(time.perf_counter)
        with client.stream("POST", base + path, json=body) as response:
            reader.check(response)
            for line in response.iter_lines():
                reader.line(line)
    return reader.measured()


async def astream(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> Measured:
    """``stream`` on the running loop, timed by the loop's clock."""
    reader = _Reader(asyncio.get_running_loop().time)
    async with client.stream("POST", url, json=body) as response:
        reader.check(response)
        async for line in response.aiter_lines():
            reader.line(line)
    return reader.measured()


def _text(event: dict[str, Any]) -> str:
    if not event.get("choices"):
        return ""
    choice = event["choices"][0]
    return str(choice.get("delta", {}).get("content") or choice.get("text") or "")


PROMPT = "x" * 4 * 6000  # ~6000 tokens: a prefill long enough to time


def test_client_ttft_and_tpot_match_the_model_within_ten_percent(
    profile_8b: ModelProfile,
) -> None:
    # In virtual time: the server paces tokens by its clock and the client reads them by the
    # same loop's clock, over real HTTP; what a loaded host adds takes no virtual time. On
    # the wall clock a loaded host added its scheduling delays (tens to hundreds of ms) to
    # 6 ms decode steps and a 225 ms prefill. The wall-clock agreement is
    # tests/loadgen/test_against_simulator.py's first test.
    async def measure() -> tuple[RealtimeServer, list[Measured]]:
        clock = asyncio.get_running_loop().time
        server = RealtimeServer.standalone(
            "rt-0", profile_8b, epoch=START, sample_interval_s=0.5, clock=clock
        )
        body = {
            "model": server.model,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 80,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        async with serving_here(server.app()) as base, httpx.AsyncClient(timeout=30) as client:
            url = base + "/v1/chat/completions"
            await astream(client, url, body | {"max_tokens": 2})  # warm the path up
            measured = [await astream(client, url, body) for _ in range(3)]
            # A batch of four: slower steps, still matched.
            measured += await asyncio.gather(*(astream(client, url, body) for _ in range(4)))
        return server, measured

    server, measured = run_in_virtual_time(measure())
    records = sorted((c.record for c in server.completions), key=lambda r: r.start)[1:]
    assert len(records) == len(measured) == 7
    errors = [m.tpot / r.tpot_s - 1 for m, r in zip(measured[:3], records[:3], strict=True)]
    print(  # shown with -s
        f"\nTTFT {statistics.median(m.ttft for m in measured[:3]) * 1e3:.2f} ms against the "
        f"model's {statistics.median(r.ttft_s for r in records[:3]) * 1e3:.2f} ms; TPOT errors "
        + ", ".join(f"{e:+.3%}" for e in errors)
    )
    # One at a time: the median of three client measurements against the model's.
    client_ttft = statistics.median(m.ttft for m in measured[:3])
    assert client_ttft == pytest.approx(statistics.median(r.ttft_s for r in records[:3]), rel=0.1)
    for m, r in zip(measured[:3], records[:3], strict=True):
        assert m.tpot == pytest.approx(r.tpot_s, rel=0.10)
    # Concurrent clients: matched by pace (their order at the server is the loop's).
    batch_tpot = sorted(r.tpot_s for r in records[3:])
    assert sorted(m.tpot for m in measured[3:]) == pytest.approx(batch_tpot, rel=0.10)
    assert max(batch_tpot) > records[0].tpot_s  # a batch of four decodes slower than one
    events = measured[0].events
    assert events[-1] == "[DONE]"
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert events[-3]["choices"][0]["finish_reason"] == "length"
    assert events[-2]["choices"] == []
    assert events[-2]["usage"] == {
        "prompt_tokens": 6000,
        "completion_tokens": 80,
        "total_tokens": 6080,
    }
    assert measured[0].tokens == 80


def test_completions_stream_and_whole_answers(server: RealtimeServer) -> None:
    with serving(server) as base:
        m = stream(
            base, "/v1/completions", {"prompt": "hello " * 40, "max_tokens": 5, "stream": True}
        )
        whole = httpx.post(
            base + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 7},
            timeout=10,
        ).json()
        missing = httpx.post(base + "/v1/completions", json={"model": "nope", "prompt": "x"})
        bad = httpx.post(base + "/v1/completions", json={"prompt": "x", "max_tokens": "many"})
        not_json = httpx.post(base + "/v1/completions", content=b"{")
        models = httpx.get(base + "/v1/models").json()
        metrics = httpx.get(base + "/metrics").text
    assert m.tokens == 5
    assert m.events[0]["object"] == "text_completion"
    assert "usage" not in m.events[-2]  # usage only when asked for
    assert whole["object"] == "chat.completion"
    assert whole["usage"]["completion_tokens"] == 7
    assert whole["choices"][0]["message"]["content"].count(" w") == 7
    assert missing.status_code == 404
    assert bad.status_code == not_json.status_code == 400
    assert missing.json()["error"]["type"] == "NotFoundError"
    assert models["data"][0]["id"] == server.model
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    success = families["vllm:request_success"].samples
    assert sum(s.value for s in success if s.name.endswith("_total")) == 2
    assert "vllm:time_to_first_token_seconds" in families


def test_content_part_arrays_count_like_the_same_text_as_a_string(server: RealtimeServer) -> None:
    # GuideLLM and the openai client's typed messages send content as an array of parts;
    # the prompt is the parts' text, not the array's JSON (which added ~8 tokens a message).
    text = "y" * 4 * 50
    parts = [{"type": "text", "text": text[:120]}, {"type": "text", "text": text[120:]}]
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 400}}

    def usage(content: Any) -> dict[str, int]:
        body = {"messages": [{"role": "user", "content": content}] * 2, "max_tokens": 3}
        answer = httpx.post(base + "/v1/chat/completions", json=body, timeout=10)
        assert answer.status_code == 200
        return answer.json()["usage"]

    with serving(server) as base:
        plain, split, with_image = usage(text), usage(parts), usage([*parts, image])
    assert plain["prompt_tokens"] == 100  # two messages of 50 tokens
    assert split == plain
    assert with_image == plain  # an image part has no text tokens
