"""The Locust engine: its measurement against the asyncio engine's, and a real distributed run.

Locust is never imported here (it patches the standard library with gevent on import, which
would change every other test in this process): the user's request function is
``loadgen.client.send_sync``, tested directly, and the distributed runs start a real Locust
master and real ``locust --worker`` processes on loopback against the simulator's server.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import numpy as np
import pytest
from click.testing import CliRunner

from infersight.cli.commands_loadtest import loadtest
from infersight.cli.settings import Settings
from infersight.core.errors import InvalidInput, Unavailable
from infersight.core.loadtest import Phase, RequestResult, ScenarioKind
from infersight.loadgen import locust_engine
from infersight.loadgen.client import Endpoint, send, send_sync
from infersight.loadgen.distributed import RunSpec, decode, encode, merge, phase_at, users_at
from infersight.loadgen.locust_engine import LocustEngine
from infersight.loadgen.runner import Runner
from infersight.loadgen.scenarios import burst, steady
from infersight.loadgen.workload import DistKind, Lengths, Sampled
from tests.loadgen.support import scaled_profile, serving


def sse(*events: object) -> bytes:
    lines = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events]
    return "".join(lines).encode()


def chunk(text: str | None = None, *, role: bool = False) -> dict[str, object]:
    delta: dict[str, object] = {} if text is None else {"content": text}
    if role:
        delta["role"] = "assistant"
    return {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


#: A vLLM-like stream: a role-only chunk, uneven content chunks (one carries two tokens and one
#: is empty), a finish chunk, usage, then [DONE] and a trailing comment line.
RECORDED = (
    sse(
        chunk("", role=True),
        chunk(" Hello"),
        chunk(" there,"),
        chunk(""),
        chunk(" how are"),
        chunk(" you"),
        chunk(),
        {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 6}},
        "[DONE]",
    )
    + b": keep-alive\n\n"
)


def both(body: bytes, status: int = 200, endpoint: Endpoint | None = None):
    """The asyncio engine's and the Locust user's result for the same response and clock."""
    endpoint = endpoint or Endpoint("http://server:8000/v1", "m")

    def handler(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body)

    def clock() -> Callable[[], float]:
        ticks = itertools.count()
        return lambda: float(next(ticks)) * 0.25  # a quarter second per look at the clock

    async def asyncio_side() -> RequestResult:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await send(
                client,
                endpoint,
                "hello",
                input_tokens=7,
                max_tokens=6,
                seq=1,
                phase=0,
                t0=0.0,
                clock=clock(),
            )

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        sent_epoch, locust = send_sync(
            client,
            endpoint,
            "hello",
            input_tokens=7,
            max_tokens=6,
            clock=clock(),
            wall_clock=lambda: 1e9,
        )
    assert sent_epoch == 1e9
    return asyncio.run(asyncio_side()), locust


def measured(r: RequestResult) -> tuple[object, ...]:
    return (r.ttft_s, r.tpot_s, r.itl_s, r.e2e_s, r.output_tokens, r.ok, r.error)


def test_the_locust_user_measures_a_recorded_stream_exactly_as_loadgen() -> None:
    a, b = both(RECORDED)
    assert measured(a) == measured(b)
    # Clock: 0 sent; 0.25 role; 0.5, 0.75 content; 1.0 empty; 1.25, 1.5 content; …; 2.25 DONE.
    assert b.ttft_s == 0.5
    assert b.itl_s == (0.25, 0.5, 0.25)
    assert b.tpot_s == pytest.approx(1.0 / 5)  # first → last content chunk over 6 − 1 tokens
    assert b.e2e_s == 2.25
    assert b.output_tokens == 6


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        (b"overloaded", 503, "HTTP 503: overloaded"),
        (sse(chunk(" a"), {"error": {"message": "engine died"}}, "[DONE]"), 200, "engine died"),
        (sse(chunk(" a"), "{not json", "[DONE]"), 200, "not JSON"),
        (sse(chunk(), "[DONE]"), 200, "without any content"),
    ],
)
def test_failures_read_the_same_on_both_engines(body: bytes, status: int, error: str) -> None:
    a, b = both(body, status)
    assert measured(a) == measured(b)
    assert not b.ok
    assert error in b.error


def test_the_locust_user_sends_the_same_request_with_trace_context() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=RECORDED)

    endpoint = Endpoint("http://server:8000", "llama", chat=False, api_key="sk-1")
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        _, result = send_sync(client, endpoint, "hi", input_tokens=1, max_tokens=6)
    (request,) = seen
    assert request.url.path == "/v1/completions"
    body = json.loads(request.content)
    assert body["stream"] is True
    assert body["prompt"] == "hi"
    version, trace_id, _span, flags = request.headers["traceparent"].split("-")
    assert (version, flags) == ("00", "01")
    assert trace_id == result.trace_id == request.headers["x-request-id"]
    assert request.headers["authorization"] == "Bearer sk-1"


PHASES = (Phase(0, "a", 2, 0.0, 2.0), Phase(1, "b", 4, 2.0, 3.0))


def test_records_merge_into_one_sorted_run_in_their_phases(tmp_path) -> None:
    late = RequestResult(0, 0, 0.0, 1.5, 0.2, 0.05, (0.05, 0.05), 10, 3, True, "", "t" * 32)
    early = RequestResult(0, 0, 0.0, 2.0, None, None, (), 10, 0, False, "HTTP 500: x", "u")
    path = tmp_path / "records.jsonl"
    lines = [
        json.dumps([1, *encode(late, 1000.0 + 2.5)]),
        json.dumps([0, *encode(early, 1000.0 + 0.5)]),
        json.dumps([0, "not", "a", "record"]),
    ]
    path.write_text("\n".join(lines) + "\n")
    merged = merge(path, 1000.0, PHASES)
    assert merged.per_worker == {0: 2, 1: 1}
    assert merged.bad == 1
    first, second = merged.results
    assert (first.seq, first.phase, first.sent_s, first.ok) == (1, 0, 0.5, False)
    assert (second.seq, second.phase, second.sent_s) == (2, 1, 2.5)
    assert second.itl_s == late.itl_s
    assert second.ttft_s == late.ttft_s
    capped = merge(path, 1000.0, PHASES, limit=1)
    assert (len(capped.results), capped.dropped) == (1, 2)  # past the cap: not even read


def test_phases_as_a_shape() -> None:
    assert [users_at(PHASES, t) for t in (0.0, 1.99, 2.0, 4.99, 5.0)] == [2, 2, 4, 4, None]
    assert [phase_at(PHASES, t) for t in (-0.1, 0.0, 2.0, 9.0)] == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="not finite"):
        decode([float("nan"), 1, None, None, [], 1, 1, True, "", ""], 0.0, PHASES)


def test_a_missing_locust_names_the_extra(monkeypatch) -> None:
    real = locust_engine.importlib.util.find_spec
    monkeypatch.setattr(
        locust_engine.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "locust" else real(name, *a),
    )
    with pytest.raises(Unavailable) as caught:
        locust_engine.require_locust()
    assert "infersight[locust]" in caught.value.details["install"]


def fixed(n: int) -> Lengths:
    return Lengths(DistKind.FIXED, n)


@pytest.mark.e2e
def test_a_master_and_two_workers_gather_one_run_that_agrees_with_the_server() -> None:
    # The asyncio agreement test's settings (60 ms decode steps, 1000-token prompts, 20-token
    # outputs, four users), here on a Locust master and two worker processes.
    profile = scaled_profile(10.0)
    with serving(profile) as (url, server, sink):
        spec = RunSpec(url, server.model, input_tokens="fixed:1000", output_tokens="fixed:20")
        run = LocustEngine(steady(4, 6.0), spec, workers=2, drain_s=30.0).run(
            name="locust", scenario=ScenarioKind.STEADY
        )
        asyncio_run = asyncio.run(
            Runner(
                Endpoint(url, server.model),
                steady(4, 6.0),
                Sampled(fixed(1000), fixed(20), np.random.default_rng(1)),
                rng=np.random.default_rng(2),
            ).run(name="asyncio", scenario=ScenarioKind.STEADY)
        )
    per_worker = run.config["locust"]["requests_per_worker"]
    assert set(per_worker) == {"0", "1"}  # both workers contributed
    assert all(n > 0 for n in per_worker.values())
    assert len(run.results) == sum(per_worker.values())
    assert len(run.results) >= 8
    assert [r.seq for r in run.results] == list(range(1, len(run.results) + 1))
    assert all(r.ok for r in run.results)
    records = {r.trace_id: r for r in sink.records}
    ttft_errors, tpot_errors = [], []
    for result in run.results:
        record = records[result.trace_id]  # the workers sent traceparent: found by trace id
        assert result.output_tokens == record.output_tokens == 20
        assert result.input_tokens == record.input_tokens == 1000
        ttft_errors.append(abs(result.ttft_s - record.ttft_s) / record.ttft_s)
        tpot_errors.append(abs(result.tpot_s - record.tpot_s) / record.tpot_s)
    ttft, tpot = statistics.median(ttft_errors), statistics.median(tpot_errors)

    def median(r: object, metric: str) -> float:
        return statistics.median(getattr(x, metric) for x in r.results)  # type: ignore[attr-defined]

    print(
        f"\nlocust (2 workers) against the server's records over {len(ttft_errors)} requests: "
        f"TTFT median error {ttft:.2%}, TPOT {tpot:.2%}; client medians locust / asyncio: "
        f"TTFT {median(run, 'ttft_s'):.3f} / {median(asyncio_run, 'ttft_s'):.3f} s, "
        f"TPOT {median(run, 'tpot_s'):.4f} / {median(asyncio_run, 'tpot_s'):.4f} s"
    )
    assert ttft < 0.10
    assert tpot < 0.10
    assert median(run, "ttft_s") == pytest.approx(median(asyncio_run, "ttft_s"), rel=0.15)
    assert median(run, "tpot_s") == pytest.approx(median(asyncio_run, "tpot_s"), rel=0.10)
    assert set(run.config["generator"]["workers"]) == {"0", "1"}


@dataclass
class Obj:
    settings: Settings


@pytest.mark.e2e
def test_a_step_run_on_locust_is_stored_and_reported_like_an_asyncio_run(tmp_path) -> None:
    from infersight.storage.engine import create_store_engine
    from infersight.storage.runs import get_run, list_runs

    url = f"sqlite:///{tmp_path / 'lt.db'}"
    common = ["--scenario", "step", "--levels", "1,3", "--hold", "2", "--input-tokens", "fixed:64"]
    common += ["--output-tokens", "fixed:40", "--seed", "3", "--json", "--quiet"]
    with serving(scaled_profile(3.0)) as (base, server, _sink):
        bodies = {}
        for engine in ("asyncio", "locust"):
            args = [base, "--model", server.model, *common, "--engine", engine, "--workers", "2"]
            result = CliRunner().invoke(loadtest, args, obj=Obj(Settings(database_url=url)))
            assert result.exit_code == 0, result.output
            bodies[engine] = json.loads(result.stdout)
    assert bodies["locust"].keys() == bodies["asyncio"].keys()  # --json: the same schema
    assert bodies["locust"]["generator"].keys() >= bodies["asyncio"]["generator"].keys()
    assert [p["concurrency"] for p in bodies["locust"]["phases"]] == [1, 3]
    store = create_store_engine(url)
    try:
        newest = list_runs(store)[0]
        run = get_run(store, newest.id)
    finally:
        store.dispose()
    assert run.id == bodies["locust"]["run"]
    assert run.config["engine"] == "locust"
    assert len(run.results) == bodies["locust"]["requests"]

    def most_in_flight(phase: int) -> int:
        spans = [(r.sent_s, r.done_s) for r in run.results if r.phase == phase]
        return max(sum(s <= t < d for s, d in spans) for t, _ in spans)

    assert [most_in_flight(0), most_in_flight(1)] == [1, 3]


@pytest.mark.e2e
def test_workers_that_never_connect_fail_the_run_instead_of_hanging() -> None:
    with serving(scaled_profile(1.0)) as (url, server, _sink):
        engine = LocustEngine(
            steady(1, 1.0),
            RunSpec(url, server.model, input_tokens="fixed:8", output_tokens="fixed:2"),
            workers=0,
            remote_workers=1,  # nobody will come
            connect_timeout_s=2.0,
        )
        with pytest.raises(Unavailable, match="only 0 of 1 Locust workers connected"):
            engine.run(name="alone", scenario=ScenarioKind.STEADY)


def test_a_target_that_does_not_answer_fails_before_any_process_starts() -> None:
    engine = LocustEngine(
        steady(1, 1.0), RunSpec("http://127.0.0.1:9", "m"), workers=1, connect_timeout_s=2.0
    )
    with pytest.raises(Unavailable, match="did not answer a first test request"):
        engine.run(name="nobody", scenario=ScenarioKind.STEADY)


def test_a_spec_round_trips_and_gives_each_worker_its_share_of_a_replay() -> None:
    spec = RunSpec(
        "http://server:8000",
        "m",
        replay=((10, 1), (20, 2), (30, 3), (40, 4)),
        long_output=500,
        long_fraction=0.5,
        seed=7,
    )
    again = RunSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec
    firsts = []
    for worker in (0, 1):
        workload = again.workload(worker, 2, again.rng(worker))
        shapes = [workload.next() for _ in range(4)]
        firsts.append(shapes[0].input_tokens)
        assert [s.input_tokens for s in shapes][:2] == [10 + 20 * worker, 20 + 20 * worker]
        assert {s.output_tokens for s in shapes} <= {1, 2, 3, 4, 500}
    assert firsts == [10, 30]  # two workers start at different halves of the production order
    # seeded workers draw reproducible, different prompts
    assert again.rng(0).integers(0, 1 << 30) == spec.rng(0).integers(0, 1 << 30)
    assert spec.rng(0).integers(0, 1 << 30) != spec.rng(1).integers(0, 1 << 30)
    with pytest.raises(InvalidInput):
        RunSpec.from_dict({"base_url": "ftp://x", "model": "m"})


@pytest.mark.e2e
def test_a_worker_that_cannot_start_fails_the_run_with_its_log(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(locust_engine, "LOCUSTFILE", tmp_path / "no_such_locustfile.py")
    with serving(scaled_profile(1.0)) as (url, server, _sink):
        engine = LocustEngine(
            steady(1, 1.0),
            RunSpec(url, server.model, input_tokens="fixed:8", output_tokens="fixed:2"),
            workers=1,
            connect_timeout_s=120.0,  # the worker's exit is seen long before this
        )
        with pytest.raises(Unavailable, match="Locust worker 0 exited") as caught:
            engine.run(name="broken", scenario=ScenarioKind.STEADY)
    assert "no_such_locustfile" in caught.value.details["log"]


@pytest.mark.e2e
def test_a_worker_started_by_hand_joins_the_run_with_the_printed_command() -> None:
    joined: list[subprocess.Popen[bytes]] = []

    def join(line: str) -> None:  # what a user on another host does with the notice
        command = line.split("`")[1].replace("<this host>", "127.0.0.1")
        joined.append(subprocess.Popen(
            [sys.executable, "-m", *command.split()], stdout=subprocess.DEVNULL
        ))  # fmt: skip

    try:
        with serving(scaled_profile(3.0)) as (url, server, _sink):
            spec = RunSpec(url, server.model, input_tokens="fixed:32", output_tokens="fixed:10")
            run = LocustEngine(
                steady(2, 3.0), spec, workers=1, remote_workers=1, notice=join, drain_s=20.0
            ).run(name="joined", scenario=ScenarioKind.STEADY)
    finally:
        for process in joined:
            process.terminate()
            process.wait(30)
    assert len(joined) == 1
    per_worker = run.config["locust"]["requests_per_worker"]
    assert len(per_worker) == 2  # the local worker and the one that joined
    assert all(n > 0 for n in per_worker.values())
    assert all(r.ok for r in run.results)


@pytest.mark.e2e
def test_a_burst_on_locust_raises_the_users_over_the_workers_and_lets_them_go() -> None:
    with serving(scaled_profile(3.0)) as (url, server, _sink):
        spec = RunSpec(url, server.model, input_tokens="fixed:20", output_tokens="fixed:20")
        run = LocustEngine(burst(1, 3.0, 2.0, 2.0, 2.0), spec, workers=2, drain_s=20.0).run(
            name="burst", scenario=ScenarioKind.BURST
        )
    assert all(r.ok for r in run.results)
    in_flight = [most_in_flight(run.results, p) for p in (0, 1, 2)]
    assert in_flight[:2] == [1, 3]
    # Back down after the burst, judged over the second half of the last phase (from 5 s):
    # Locust's stop reaches a worker a moment after the shape's tick — on a loaded host up to
    # a tick later — and a burst user whose request ended in that moment has sent its next one.
    settled = tuple(r for r in run.results if r.phase == 2 and r.sent_s >= 5.0)
    assert settled, "no request in the second half of the last phase"
    assert most_in_flight(settled, 2) < 3
    assert max(r.sent_s for r in run.results) < 6.5  # nobody starts long after the last phase


def most_in_flight(results: tuple[RequestResult, ...], phase: int) -> int:
    spans = [(r.sent_s, r.done_s) for r in results if r.phase == phase]
    return max(sum(s <= t < d for s, d in spans) for t, _ in spans)
