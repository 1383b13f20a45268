"""``core.profile``: folded stacks → busy, idle, GIL and lock waits, tokenizer and logging shares.

The stacks are py-spy's raw format as it writes it (``--idle --threads --native``), trimmed.
"""

from __future__ import annotations

import pytest

from infersight.alerts.diagnose import host_side, with_profile
from infersight.core.errors import InvalidInput
from infersight.core.profile import (
    MAX_DEPTH,
    Limit,
    check_bounds,
    dominant,
    parse_folded,
    summarise,
    thread_state,
)

T = "thread (0x1A2B): MainThread"
BOOT = "Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982)"
LIBC = "0x7f88fb6a3f16 (libc.so.6)"
PY = "(libpython3.11.so.1.0)"
TOK = "infersight/simulator/tokenizer.py"

FOLDED = "\n".join([
    # the serving thread encodes a prompt
    f"{T};{BOOT};_serve (infersight/simulator/realtime.py:250);"
    f"encode ({TOK}:40);_merge_word ({TOK}:22) 60",
    # it waits for the GIL after a sleep returned (time_sleep → take_gil)
    f"{T};{BOOT};serve (app.py:10);time_sleep {PY};"
    f"pthread_cond_timedwait (libc.so.6);{LIBC} 20",
    # an event loop parked in epoll: idle, left out of the shares
    f"{T};{BOOT};BaseEventLoop._run_once (asyncio/base_events.py:1898);"
    f"select (selectors.py:469);epoll_wait (libc.so.6) 500",
    # a logging handler fsyncs
    f"{T};{BOOT};handle (app.py:20);Logger.info (logging/__init__.py:1489);"
    f"Handler.handle (logging/__init__.py:978);emit (app.py:33);fsync (libc.so.6) 10",
    # blocked on a lock in application code: contention
    f"{T};{BOOT};update (app.py:40);lock_PyThread_acquire_lock {PY};sem_clockwait (libc.so.6) 10",
    # an idle worker waiting on its queue: idle by design
    f"{T};{BOOT};_worker (concurrent/futures/thread.py:81);Queue.get (queue.py:171);"
    f"Condition.wait (threading.py:320);lock_PyThread_acquire_lock {PY};sem_wait (libc.so.6) 300",
    # a condition variable of a native library (its thread pool waits for work): idle
    f"{T};{BOOT};run (app.py:50);rayon::sleep (libtokenizers.so);pthread_cond_wait (libc.so.6) 40",
])  # fmt: skip


def test_shares_are_of_busy_samples_and_name_each_limit() -> None:
    summary = summarise(parse_folded(FOLDED), native=True, rate=50, seconds=3)
    assert summary["samples"] == 940
    assert summary["idle_samples"] == 840
    assert summary["busy_samples"] == 100
    assert summary["shares"] == {"tokenizer": 0.6, "gil": 0.2, "logging": 0.1, "lock": 0.1}
    top = dominant(summary)
    assert top is not None
    assert top.limit is Limit.TOKENIZER
    assert top.sentence == "60 % of samples in the tokenizer"
    assert summary["self"][0]["frame"] == "infersight.simulator.tokenizer:_merge_word"
    assert summary["modules"][0]["frame"] == "infersight.simulator.tokenizer"
    assert any(r["frame"].startswith("(gil wait) app:serve") for r in summary["self"])


def test_without_native_frames_gil_and_locks_are_not_claimed() -> None:
    folded = f"{T};{BOOT};serve (app.py:10) 90\n{T};{BOOT};emit (logging/__init__.py:1100) 10"
    summary = summarise(parse_folded(folded), native=False, rate=50, seconds=2)
    assert summary["measured"] == ["tokenizer", "logging"]
    assert set(summary["shares"]) == {"tokenizer", "logging"}
    assert summary["shares"]["logging"] == 0.1


@pytest.mark.parametrize(
    ("stack", "state"),
    [
        ("serve (a.py:1);pthread_cond_timedwait (libc.so.6)", "gil"),
        ("serve (a.py:1);take_gil (libpython3.12.so)", "gil"),
        ("serve (a.py:1);work (libfoo.so);pthread_cond_timedwait (libc.so.6)", "idle"),
        ("serve (a.py:1);clock_nanosleep (libc.so.6)", "idle"),
        ("serve (a.py:1);sem_timedwait (libc.so.6)", "lock"),
        ("Event.wait (threading.py:600);sem_timedwait (libc.so.6)", "idle"),
        ("serve (a.py:1)", "busy"),
        ("serve (a.py:1);memcpy (libc.so.6)", "busy"),
        # The interpreter by its exact file names, wherever it lives.
        (
            "serve (a.py:1);take_gil (/usr/lib/libpython3.11.so.1.0);"
            "pthread_cond_timedwait (/lib/x86_64-linux-gnu/libc.so.6)",
            "gil",
        ),
        (
            "serve (a.py:1);PyEval_RestoreThread (python3.11);pthread_cond_wait (libpthread.so.0)",
            "gil",
        ),
        # An extension module waiting on its own condition variable is not the GIL, though
        # "python" is in its name.
        (
            "encode_batch (tokenizers/implementations/base_tokenizer.py:9);"
            "tokenizers::encode_batch (tokenizers.cpython-311-x86_64-linux-gnu.so);"
            "pthread_cond_wait (libc.so.6)",
            "idle",
        ),
        (
            "forward (torch/nn/modules/module.py:1);c10::wait (libtorch_python.so);"
            "pthread_cond_wait (libc.so.6)",
            "idle",
        ),
        ("serve (a.py:1);wait (libpython_helper.so);pthread_cond_wait (libc.so.6)", "idle"),
    ],
)
def test_thread_states(stack: str, state: str) -> None:
    (sample,) = parse_folded(f"{stack} 1")
    assert thread_state(sample.frames) == state


def test_bad_input_is_refused_and_bounded() -> None:
    with pytest.raises(InvalidInput, match="no sample count"):
        parse_folded("a (a.py:1);b (b.py:2)")
    deep = ";".join(f"f{i} (m.py:{i})" for i in range(MAX_DEPTH + 50))
    (sample,) = parse_folded(f"{deep} 3")
    assert len(sample.frames) == MAX_DEPTH
    with pytest.raises(InvalidInput, match="seconds"):
        check_bounds(600, 50)
    with pytest.raises(InvalidInput, match="rate"):
        check_bounds(5, 10_000)


def test_too_few_samples_name_nothing() -> None:
    summary = summarise(parse_folded("tok (tokenizers/x.py:1) 5"), native=True, rate=50, seconds=1)
    assert summary["shares"]["tokenizer"] == 1.0
    assert dominant(summary) is None


def test_a_host_side_diagnosis_becomes_specific() -> None:
    diagnosis = {"cause": "host_bound", "instance": "i-0", "confidence": 0.8, "evidence": []}
    assert host_side(diagnosis)
    assert not host_side({**diagnosis, "cause": "overload"})
    assert not host_side({**diagnosis, "instance": None})
    idle_gpu = {"signal": "util_gpu", "ratio": 0.4, "current": 0.3, "baseline": 0.75}
    assert host_side({**diagnosis, "cause": "queue_backlog", "evidence": [idle_gpu]})
    busy_gpu = {**idle_gpu, "ratio": 1.0}
    assert not host_side({**diagnosis, "cause": "queue_backlog", "evidence": [busy_gpu]})
    summary = summarise(parse_folded(FOLDED), native=True, rate=50, seconds=3)
    profiled = with_profile(diagnosis, {"id": 7, "state": "done", "result": summary})
    assert profiled["cause"] == "host_bound"
    assert profiled["detail"] == "tokenizer"
    assert profiled["profile"]["sentence"] == "60 % of samples in the tokenizer"
    assert profiled["profile"]["confidence"] == 0.6
    assert profiled["evidence"][-1]["signal"] == "profile:tokenizer"
    assert profiled["evidence"][-1]["current"] == 0.6
    again = with_profile(profiled, {"id": 8, "state": "failed", "error": "not permitted: x"})
    assert "detail" not in again
    assert again["profile"] == {"id": 8, "state": "failed", "error": "not permitted: x"}
    assert not [e for e in again["evidence"] if e["signal"].startswith("profile:")]
