"""The OpenAI-compatible streaming endpoint, measured with a real HTTP client (httpx)."""

from __future__ import annotations

import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from simulator.profiles import ModelProfile
from simulator.realtime import RealtimeServer
from tests.peers import serving_app
from tests.simulator.support import START


def serving(server: RealtimeServer) -> AbstractContextManager[str]:
    return serving_app(server.app(), timeout_s=10)


@pytest.fixture
def server(profile_8b: ModelProfile) -> RealtimeServer:
    return RealtimeServer.standalone("rt-0", profile_8b, epoch=START, sample_interval_s=0.5)


@dataclass
class Measured:
    ttft: float
    tpot: float
    tokens: int
    events: list[Any]


def stream(base: str, path: str, body: dict[str, Any]) -> Measured:
    events: list[Any] = []
    token_times: list[float] = []
    with httpx.Client(timeout=30) as client:
        sent = time.perf_counter()
        with client.stream("POST", base + path, json=body) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line.removeprefix("data: ")
                events.append(data if data == "[DONE]" else json.loads(data))
                if data != "[DONE]" and _text(events[-1]):
                    token_times.append(time.perf_counter())
    n = len(token_times)
    return Measured(
        ttft=token_times[0] - sent,
        tpot=(token_times[-1] - token_times[0]) / (n - 1),
        tokens=n,
        events=events,
    )


def _text(event: dict[str, Any]) -> str:
    if not event.get("choices"):
        return ""
    choice = event["choices"][0]
    return str(choice.get("delta", {}).get("content") or choice.get("text") or "")


PROMPT = "x" * 4 * 6000  # ~6000 tokens: a prefill long enough to time


def test_client_ttft_and_tpot_match_the_model_within_ten_percent(
    server: RealtimeServer,
) -> None:
    body = {
        "model": server.model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 80,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with serving(server) as base:
        stream(base, "/v1/chat/completions", body | {"max_tokens": 2})  # warm the path up
        measured = [stream(base, "/v1/chat/completions", body) for _ in range(3)]
        with ThreadPoolExecutor(4) as pool:  # a batch of four: slower steps, still matched
            measured += list(
                pool.map(lambda _: stream(base, "/v1/chat/completions", body), range(4))
            )
    records = sorted((c.record for c in server.completions), key=lambda r: r.start)[1:]
    assert len(records) == len(measured) == 7
    # One at a time: the median of three client measurements against the model's.
    client_ttft = statistics.median(m.ttft for m in measured[:3])
    assert client_ttft == pytest.approx(statistics.median(r.ttft_s for r in records[:3]), rel=0.1)
    for m, r in zip(measured[:3], records[:3], strict=True):
        assert m.tpot == pytest.approx(r.tpot_s, rel=0.10)
    # Concurrent clients share the GIL with the server here, so their send times are not the
    # server's arrival times; their decode pace is still the model's.
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
