"""A stuck store is seen, not waited on (#32, defect 4): with the request tables locked by
another session, ``infersight serve``'s reads answer 503 once their lock wait runs out, and
``/healthz`` answers at once, from memory, ``degraded: store slow`` — also while many readers
are blocked and hold every pooled connection; ``/livez`` stays 200."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from tests.api.live import serve
from tests.conftest import Store
from tests.waiting import until

pytestmark = [pytest.mark.postgres, pytest.mark.e2e]

READ = "/api/v1/latency?range=1h"
#: A guard against a hang, far beyond what the bounded answers take (they come at once, or
#: after the lock timeout the test sets).
GUARD_S = 60.0


@contextmanager
def locked(store: Store) -> Iterator[None]:
    """The request tables locked by another session until the block ends."""
    with store.engine.connect() as holder:
        holder.execute(text("LOCK TABLE requests, request_rollups IN ACCESS EXCLUSIVE MODE"))
        try:
            yield
        finally:
            holder.rollback()


def slow_health(url: str) -> httpx.Response | None:
    answer = httpx.get(f"{url}/healthz", timeout=GUARD_S)
    return answer if answer.json()["status"].startswith("degraded: store slow") else None


def test_a_read_of_a_locked_table_is_a_503_and_healthz_says_the_store_is_slow(
    pg_store: Store, tmp_path: Path
) -> None:
    env = {
        "INFERSIGHT_DATABASE_LOCK_TIMEOUT_S": "1",
        "INFERSIGHT_DATABASE_STATEMENT_TIMEOUT_S": "5",
    }
    with serve(pg_store.url, tmp_path, **env) as served, locked(pg_store):
        answer = httpx.get(f"{served.url}{READ}", timeout=GUARD_S)
        assert answer.status_code == 503, answer.text
        error = answer.json()["error"]
        assert error["code"] == "unavailable"
        assert error["details"] == {"reason": "store_timeout"}
        assert "did not answer in time" in error["message"]
        assert answer.headers["retry-after"]
        # A browser's view of the same: the dashboard's error page, which offers it again.
        page = httpx.get(f"{served.url}/ui/latency?range=1h", timeout=GUARD_S)
        assert page.status_code == 503
        assert page.headers["content-type"].startswith("text/html")
        assert page.headers["retry-after"]
        assert "did not answer in time" in page.text
        assert 'href="/ui/latency?range=1h" class="retry">Try again' in page.text
        health = until(lambda: slow_health(served.url), "/healthz says the store is slow")
        assert health.status_code == 503
        assert health.json()["store"] == "slow"
        live = httpx.get(f"{served.url}/livez", timeout=GUARD_S)
        assert live.status_code == 200
        assert live.json()["status"] == "alive"
    assert "Traceback" not in served.output()


def test_healthz_answers_from_memory_while_many_readers_are_blocked(
    pg_store: Store, tmp_path: Path
) -> None:
    """40 readers wait on the lock (more than the pool and the thread pool hold); the health
    answer does not queue behind them. The lock wait is long (120 s), so an answer that
    waited on the store would not come within the guard."""
    # Every reader computes at once (no turns): readers that hold every pooled connection are
    # the case here; with turns, the next test shows the line is bounded instead.
    env = {
        "INFERSIGHT_DATABASE_LOCK_TIMEOUT_S": "120",
        "INFERSIGHT_DATABASE_POOL_TIMEOUT_S": "120",
        "INFERSIGHT_ANSWER_CONCURRENCY": "0",
    }
    answers: list[int] = []
    with serve(pg_store.url, tmp_path, **env) as served:
        with locked(pg_store):

            def read(minutes: int) -> None:
                # A window of its own: the answer cache would share one query between equals.
                url = f"{served.url}/api/v1/latency?range={minutes}m"
                try:
                    answers.append(httpx.get(url, timeout=300).status_code)
                except httpx.TransportError:
                    answers.append(0)

            readers = [threading.Thread(target=read, args=(i,)) for i in range(1, 41)]
            for reader in readers:
                reader.start()

            def waiting_on_the_lock() -> bool:
                with pg_store.engine.connect() as connection:
                    count = connection.execute(
                        text(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                            " AND datname = current_database()"
                        )
                    ).scalar_one()
                return count >= 10

            until(waiting_on_the_lock, "the readers wait on the lock")
            health = until(lambda: slow_health(served.url), "/healthz says the store is slow")
            assert health.status_code == 503
            assert "a probe has waited" in health.json()["status"]
            for _ in range(5):  # every answer comes from memory, while the readers still wait
                again = httpx.get(f"{served.url}/healthz", timeout=10)
                assert again.json()["store"] == "slow"
            assert not answers  # no reader has been answered: all were still blocked
        for reader in readers:
            reader.join(timeout=300)
        assert answers == [200] * 40
        recovered = until(
            lambda: httpx.get(f"{served.url}/healthz", timeout=GUARD_S).status_code == 200,
            "/healthz is ok again once the lock is gone",
        )
        assert recovered


def test_answers_waiting_their_turn_behind_a_locked_table_are_refused_in_time(
    pg_store: Store, tmp_path: Path
) -> None:
    """Two answers at once (``INFERSIGHT_ANSWER_CONCURRENCY``) wait on the lock; six more
    wait for their turn no longer than the pool timeout and are each a 503 ``busy`` with a
    Retry-After — the line behind a stuck store does not grow without bound — and so is a
    dashboard page, whose error page links to the same view; ``/livez`` answers. Once the lock
    is gone the same reads answer 200."""
    env = {
        "INFERSIGHT_ANSWER_CONCURRENCY": "2",
        "INFERSIGHT_DATABASE_POOL_TIMEOUT_S": "1",
        "INFERSIGHT_DATABASE_LOCK_TIMEOUT_S": "600",
        "INFERSIGHT_DATABASE_STATEMENT_TIMEOUT_S": "0",  # only the lock's release ends the wait
    }
    answers: dict[int, httpx.Response] = {}
    with serve(pg_store.url, tmp_path, **env) as served:
        with locked(pg_store):

            def read(minutes: int) -> None:
                # A window of its own: the answer cache would share one query between equals.
                url = f"{served.url}/api/v1/latency?range={minutes}m"
                answers[minutes] = httpx.get(url, timeout=GUARD_S * 10)

            readers = [threading.Thread(target=read, args=(i,)) for i in range(1, 9)]
            for reader in readers:
                reader.start()
            refused = until(lambda: len(answers) >= 6 and answers, "six readers refused")
            assert len(refused) == 6  # the two computing still wait on the lock
            for answer in refused.values():
                assert answer.status_code == 503, answer.text
                assert answer.json()["error"]["details"]["reason"] == "busy"
                assert answer.headers["retry-after"]
            # A browser's page waits its turn too, and its error page offers the same view again.
            page = httpx.get(
                f"{served.url}/ui/latency?range=7d",
                headers={"Accept": "text/html"},
                timeout=GUARD_S * 10,
            )
            assert page.status_code == 503
            assert page.headers["retry-after"]
            assert "waited" in page.text
            assert 'href="/ui/latency?range=7d" class="retry">Try again' in page.text
            assert httpx.get(f"{served.url}/livez", timeout=GUARD_S).status_code == 200
        for reader in readers:
            reader.join(timeout=GUARD_S * 10)
        computed = [a for a in answers.values() if a.status_code != 503]
        assert [a.status_code for a in computed] == [200, 200]
        again = httpx.get(f"{served.url}/api/v1/latency?range=3m", timeout=GUARD_S)
        assert again.status_code == 200
    assert "Traceback" not in served.output()
