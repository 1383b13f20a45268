"""The dashboard's answer cache (``api.answers``): a cached page is the page computed
afresh, new data shows once the TTL has passed (by the app's clock or by the monotonic one),
and the cache is bounded and can be turned off."""

from __future__ import annotations

import re
import threading
from datetime import timedelta

import numpy as np
import pytest

from infersight.api import context
from infersight.api.answers import AnswerCache, Busy, TurnGate
from infersight.api.context import context_of
from infersight.api.settings import ApiSettings
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.storage import cost as cost_store
from infersight.storage import slo_store
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.dashboard.test_pages import NOW, PAGES, Client
from tests.factories import make_records
from tests.waiting import until

_RENDERED = re.compile(r" · rendered in \d+ ms")


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _client(store: Store, ttl_s: float) -> Client:
    return Client(store, answer_ttl_s=ttl_s)


def _page(client: Client, page: str, **params: str) -> str:
    response = client.get(f"/ui/{page}", params={"range": "1h", **params})
    assert response.status_code == 200, response.text[:2000]
    return _RENDERED.sub("", response.text)


def _fill(store: Store, models: tuple[str, ...] = ("llama-8b", "llama-70b"), seed: int = 7) -> None:
    open_writer(store.engine).write_requests(
        make_records(
            np.random.default_rng(seed), NOW - timedelta(minutes=50), 800,
            span=timedelta(minutes=45), models=models,
        )
    )  # fmt: skip


def test_a_cached_page_is_the_page_computed_afresh(store: Store):
    _fill(store)
    cached, plain = _client(store, 5.0), _client(store, 0.0)
    answers = context_of(cached.app).answers
    for page in PAGES:
        first = _page(cached, page)
        hits = answers.stats.hits
        again = _page(cached, page)
        assert answers.stats.hits == hits + 1, page  # the second view was served from the cache
        assert again == first == _page(plain, page), page
    assert not context_of(plain.app).answers.enabled
    assert len(context_of(plain.app).answers) == 0


def test_new_data_shows_once_the_ttl_has_passed(store: Store):
    _fill(store)
    client = _client(store, 5.0)
    before = _page(client, "latency")
    assert "llama-405b" not in before
    _fill(store, models=("llama-405b",), seed=8)  # new spans (ids come from the seed)
    assert _page(client, "latency") == before  # within the TTL: the answer computed before
    client.clock.now = NOW + timedelta(seconds=5)
    assert "llama-405b" in _page(client, "latency")  # the next TTL slot computes it afresh
    # Filters are part of the key: another query string is computed on its own.
    assert "llama-405b" in _page(client, "latency", model="llama-405b")


def test_an_answer_expires_by_the_monotonic_clock_under_a_clock_that_stands_still():
    ticks = Ticks()
    cache = AnswerCache(5.0, monotonic=ticks)
    key = cache.key("overview", {"range": "30d"}, NOW)
    assert cache.get_or_compute(key, lambda: "first") == "first"
    ticks.now = 4.9
    assert cache.get_or_compute(key, lambda: "second") == "first"
    ticks.now = 5.0
    assert cache.get_or_compute(key, lambda: "third") == "third"
    ticks.now = 10.0  # a new answer drops the ones that expired
    cache.get_or_compute(("latency",), lambda: "other")
    assert len(cache) == 1
    # The key rounds the app's time down to the TTL.
    assert cache.key("overview", {"range": "30d"}, NOW + timedelta(seconds=4.9)) == key
    assert cache.key("overview", {"range": "30d"}, NOW + timedelta(seconds=5)) != key


def test_the_cache_is_bounded_keeps_no_failure_and_can_be_off():
    cache = AnswerCache(5.0, max_entries=3)
    for i in range(10):
        cache.get_or_compute(("p", i), lambda i=i: i)
    assert len(cache) == 3
    assert cache.get_or_compute(("p", 9), lambda: "recomputed") == 9
    assert cache.get_or_compute(("p", 0), lambda: "recomputed") == "recomputed"

    def fail() -> int:
        raise RuntimeError("store down")

    with pytest.raises(RuntimeError):
        cache.get_or_compute(("q",), fail)
    assert cache.get_or_compute(("q",), lambda: 1) == 1
    off, calls = AnswerCache(0.0), []
    for _ in range(3):
        off.get_or_compute(("p",), lambda: calls.append(1))
    assert len(calls) == 3
    assert len(off) == 0
    with pytest.raises(ValueError, match="TTL"):
        AnswerCache(-1.0)
    with pytest.raises(ValueError, match="dashboard_answer_ttl_s"):
        ApiSettings(dashboard_answer_ttl_s=-1)


def test_one_answer_reads_the_cost_model_once(store: Store, monkeypatch: pytest.MonkeyPatch):
    """The parts of one page share what they read of the store's state: the Cost page's
    sections (the cost, who spent it, purchasing) read the cost model in use once per view,
    not once each; a second view reads it again (no memo outlives its answer)."""
    _fill(store)
    reads: list[str] = []
    real = context.active_model

    def counted(found_in, name):
        reads.append(name)
        return real(found_in, name)

    monkeypatch.setattr(context, "active_model", counted)
    client = _client(store, 0.0)
    _page(client, "cost")
    assert len(reads) == 1
    _page(client, "cost")
    assert len(reads) == 2


def test_the_overview_reads_the_slos_once(store: Store, monkeypatch: pytest.MonkeyPatch):
    """The Overview's SLO rows and its cost's good tokens share one read of the SLOs."""
    _fill(store)
    slo_store.put_slo(
        store.engine, SloSpec("avail", Sli(SliKind.AVAILABILITY), 0.99, timedelta(days=7)), NOW
    )
    reads: list[object] = []

    def counted(module):
        real = module.list_slos

        def read(*args, **kwargs):
            reads.append(module)
            return real(*args, **kwargs)

        return read

    monkeypatch.setattr(slo_store, "list_slos", counted(slo_store))
    monkeypatch.setattr(cost_store, "list_slos", counted(cost_store))
    _page(_client(store, 0.0), "overview")
    assert len(reads) == 1


def _holders(gate_slots: int, count: int) -> tuple[TurnGate, list[threading.Thread], list, dict]:
    """``count`` threads that each take a turn at a gate of ``gate_slots`` slots, record the
    order they got in and how many held a slot at once, and hold it until released."""
    gate = TurnGate(gate_slots)
    order: list[int] = []
    state = {"inside": 0, "most": 0}
    lock = threading.Lock()
    release = {i: threading.Event() for i in range(count)}

    def hold(i: int) -> None:
        with gate.turn():
            with lock:
                order.append(i)
                state["inside"] += 1
                state["most"] = max(state["most"], state["inside"])
            release[i].wait()
            with lock:
                state["inside"] -= 1

    threads = [threading.Thread(target=hold, args=(i,), daemon=True) for i in range(count)]
    return gate, threads, order, {"state": state, "release": release}


def _computing(cache: AnswerCache, key: tuple[str]) -> tuple[threading.Thread, threading.Event]:
    """A thread computing ``key`` in ``cache`` (``"slow"``) until the event is set; returned
    once its computation has begun (it holds a turn)."""
    inside, leave = threading.Event(), threading.Event()

    def slow() -> str:
        inside.set()
        leave.wait()
        return "slow"

    holder = threading.Thread(target=cache.get_or_compute, args=(key, slow), daemon=True)
    holder.start()
    inside.wait()
    return holder, leave


def test_turns_are_taken_in_arrival_order_and_never_more_than_the_slots():
    """Two slots and six callers: two get in, the other four wait and get in in the order
    they came as the holders leave, and never more than two hold a slot at once."""
    gate, threads, order, shared = _holders(2, 6)
    release = shared["release"]
    for i, thread in enumerate(threads):
        thread.start()
        # Start the next only once this one is in or waiting: the arrival order is known.
        until(lambda i=i: len(order) + gate.waiting == i + 1, f"caller {i} in or waiting")
    assert order == [0, 1]
    assert gate.waiting == 4
    for leaving in (1, 0, 2, 3):  # a holder leaves; the longest waiter takes its slot
        entered = len(order)
        release[leaving].set()
        until(lambda entered=entered: len(order) == entered + 1, "the next caller in")
    assert order == [0, 1, 2, 3, 4, 5]
    for event in release.values():
        event.set()
    for thread in threads:
        thread.join()
    assert shared["state"]["most"] == 2
    assert gate.waiting == 0


def test_a_failed_computation_gives_its_turn_back_and_only_waiting_is_counted():
    cache = AnswerCache(0.0, concurrency=1, turn_timeout_s=120.0)

    def fail() -> int:
        raise RuntimeError("store down")

    for _ in range(3):
        with pytest.raises(RuntimeError):
            cache.get_or_compute(("p",), fail)
    assert cache.get_or_compute(("p",), lambda: 7) == 7  # the slot came back each time
    assert cache.stats.waited == 0
    assert cache.gate is not None
    assert cache.gate.slots == 1
    assert AnswerCache(5.0).gate is None  # 0: no limit
    with pytest.raises(ValueError, match="at once"):
        AnswerCache(5.0, concurrency=-1)
    with pytest.raises(ValueError, match="answer_concurrency"):
        ApiSettings(answer_concurrency=-1)


def test_cached_answers_do_not_wait_for_a_turn():
    """A computation holding the only slot does not hold up a kept answer, and a computation
    that came while it ran waits, then runs (counted as waited)."""
    cache = AnswerCache(60.0, concurrency=1, turn_timeout_s=120.0)
    assert cache.get_or_compute(("kept",), lambda: "old") == "old"
    holder, leave = _computing(cache, ("slow",))
    assert cache.get_or_compute(("kept",), lambda: "recomputed") == "old"
    got: list[str] = []
    waiter = threading.Thread(
        target=lambda: got.append(cache.get_or_compute(("other",), lambda: "other")),
        daemon=True,
    )
    waiter.start()
    assert cache.gate is not None
    until(lambda: cache.gate is not None and cache.gate.waiting == 1, "the other computation waits")
    assert got == []
    leave.set()
    holder.join()
    waiter.join()
    assert got == ["other"]
    assert cache.stats.waited == 1


def test_a_turn_waited_for_past_its_bound_is_busy_and_leaves_the_line():
    """With the only slot held, a computation that waits past ``turn_timeout_s`` is refused
    (``Busy``: 503 ``unavailable``, reason ``busy``) and leaves the line: the next one in gets
    the slot as soon as the holder leaves."""
    cache = AnswerCache(0.0, concurrency=1, turn_timeout_s=0.05)
    holder, leave = _computing(cache, ("slow",))
    with pytest.raises(Busy) as refused:
        cache.get_or_compute(("late",), lambda: "late")
    assert refused.value.http_status == 503
    assert refused.value.details["reason"] == "busy"
    assert refused.value.details["waited_s"] >= 0.05
    assert cache.gate is not None
    assert cache.gate.waiting == 0
    leave.set()
    holder.join()
    assert cache.get_or_compute(("late",), lambda: "late") == "late"


def test_a_wait_for_the_same_answer_is_bounded_too():
    """A view of a key that is being computed waits for that computation, and that wait
    counts toward the same bound: past it the view is ``Busy``. The computation's answer is
    kept for the next view, and nothing is left of the key's line."""
    cache = AnswerCache(60.0, concurrency=2, turn_timeout_s=0.05)
    holder, leave = _computing(cache, ("k",))
    with pytest.raises(Busy) as refused:
        cache.get_or_compute(("k",), lambda: "second")
    assert refused.value.details["waited_s"] >= 0.05
    leave.set()
    holder.join()
    assert cache.get_or_compute(("k",), lambda: "again") == "slow"
    assert not cache._computing
