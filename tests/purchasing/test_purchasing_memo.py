"""The Cost and Scaling pages' purchasing advice over a week or more (``api.hourly``): one
view computes it from the whole hours, the views after it reuse it while it is as fresh as
the money job's judgements and say when it was judged, a view after that computes it again
(and so sees data that came meanwhile); views that ask at once compute it once; and the memo
is bounded."""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime, timedelta

import pytest

from infersight.api.hourly import HourlyMemo
from infersight.core.samples import GpuSample
from infersight.storage import purchasing as purchasing_reads
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.cost.conftest import api_for
from tests.purchasing import scenario as s

_JUDGED = re.compile(r", as judged at (\d\d:\d\d:\d\d) UTC")
_SPLIT = re.compile(r'id="purchasing".*?</section>', re.S)
_ADVICE = re.compile(r'<p class="purchasing-advice".*?</p>', re.S)


class Counted:
    """``storage.purchasing.hourly_gpu_usage``, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self._read = purchasing_reads.hourly_gpu_usage

    def __call__(self, *args: object, **kwargs: object) -> object:
        self.calls += 1
        return self._read(*args, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counted:
    reads = Counted()
    monkeypatch.setattr(purchasing_reads, "hourly_gpu_usage", reads)
    return reads


def _section(api, page: str) -> str:
    response = api.get(f"/ui/{page}", params={"range": "7d"})
    assert response.status_code == 200, response.text[:2000]
    found = _SPLIT.search(response.text)
    assert found is not None, "no purchasing section"
    return found.group(0)


def test_a_week_of_advice_is_judged_once_while_fresh_then_again(fleet: Store, counted: Counted):
    api = api_for(fleet, cost_model=s.MODEL.name)
    first_at = s.WEEK.end + timedelta(minutes=10)
    api.clock.now = first_at
    age = api.app.state.context.jobs.reuse_age("money")
    first = _section(api, "scaling")
    assert counted.calls == 1
    assert _JUDGED.search(first) is None  # computed by this view: nothing to say
    assert 'class="purchasing-advice"' in first

    # The Cost page, a little later: the same whole hours, judged by the Scaling page's view.
    api.clock.now = first_at + age / 2
    again = _section(api, "cost")
    assert counted.calls == 1
    judged = _JUDGED.search(again)
    assert judged is not None
    assert judged.group(1) == first_at.strftime("%H:%M:%S")
    advice = [_ADVICE.search(_JUDGED.sub("", shown)) for shown in (first, again)]
    assert None not in advice
    assert advice[0].group(0) == advice[1].group(0)  # type: ignore[union-attr]

    # Past the money job's reuse age: computed again, at this view.
    api.clock.now = first_at + age + timedelta(seconds=1)
    later = _section(api, "scaling")
    assert counted.calls == 2
    assert _JUDGED.search(later) is None


def test_gpu_hours_written_meanwhile_show_once_the_advice_is_judged_again(fleet: Store):
    api = api_for(fleet, cost_model=s.MODEL.name)
    now = s.WEEK.end + timedelta(minutes=10)
    api.clock.now = now
    before = _section(api, "scaling")
    # A whole hour of the range gets a GPU it did not have (a spool's late backlog).
    hour = s.WEEK.end - timedelta(hours=3)
    late = [
        GpuSample(
            hour + timedelta(seconds=15 * k), "late-box", 0, "late", "NVIDIA H200", util_gpu=0.9
        )
        for k in range(240)
    ]
    open_writer(fleet.engine).write_gpu_samples(late)
    try:
        api.clock.now = now + timedelta(seconds=30)
        assert _JUDGED.sub("", _section(api, "scaling")) == _JUDGED.sub("", before)
        api.clock.now = now + api.app.state.context.jobs.reuse_age("money") + timedelta(seconds=1)
        assert _section(api, "scaling") != before
    finally:
        with fleet.engine.begin() as connection:
            for table in ("gpu_samples", "gpu_rollups"):
                connection.exec_driver_sql(f"DELETE FROM {table} WHERE instance = 'late-box'")


def test_views_that_ask_at_once_compute_once() -> None:
    memo: HourlyMemo = HourlyMemo()
    now = datetime(2026, 1, 5, 12, tzinfo=UTC)
    started, release = threading.Event(), threading.Event()
    computed: list[int] = []

    def compute() -> str:
        computed.append(1)
        started.set()
        assert release.wait(60), "the test never released the computation"
        return "advice"

    answers: list[tuple[str, datetime]] = []
    first = threading.Thread(
        target=lambda: answers.append(memo.get("k", now, timedelta(minutes=5), compute))
    )
    first.start()
    assert started.wait(60)
    waiting = threading.Thread(
        target=lambda: answers.append(
            memo.get("k", now + timedelta(seconds=1), timedelta(minutes=5), compute)
        )
    )
    waiting.start()
    release.set()
    first.join()
    waiting.join()
    assert computed == [1]
    assert answers == [("advice", now), ("advice", now)]
    assert (memo.hits, memo.misses) == (1, 1)


def test_the_memo_is_bounded_and_keeps_only_what_it_may() -> None:
    memo: HourlyMemo = HourlyMemo(max_entries=2)
    now = datetime(2026, 1, 5, 12, tzinfo=UTC)
    fresh = timedelta(minutes=5)
    for key in ("a", "b", "c"):
        memo.get(key, now, fresh, lambda key=key: key.upper())
    assert memo.get("a", now, fresh, lambda: "again") == ("again", now)  # "a" went first
    assert memo.get("c", now, fresh, lambda: "never") == ("C", now)
    # An answer ``keep`` refuses (an empty advice) is computed at every view.
    calls: list[int] = []
    for _ in range(2):
        memo.get("empty", now, fresh, lambda: calls.append(1) or "", keep=bool)
    assert calls == [1, 1]
    # A clock that went back does not take an answer from its future.
    assert memo.get("c", now - timedelta(seconds=1), fresh, lambda: "earlier")[0] == "earlier"
    with pytest.raises(ValueError, match="max_entries"):
        HourlyMemo(max_entries=0)
