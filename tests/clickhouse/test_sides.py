"""Reads add the views that correct rollups and raw rows (attribution's moves, late sequences'
folds) only over the days that hold a move or a fold (``reads.Sides``), and answer exactly as
they do with every view read.

Three days of requests in ClickHouse only: the second day's requests have late sequences
folded into them, the third day's are moved by gateway spans, the first has neither. Each read
is answered twice, once as the store reads (the days probed) and once with every view
(``Sides.every``); the answers are equal, and the statements name only the views of the days
that need them."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from infersight.core.attribution import Attribution
from infersight.core.query import Method, Selector
from infersight.core.sequences import LateSequence
from infersight.core.slo import Sli, SliKind
from infersight.core.window import Resolution, Window
from infersight.storage.engine import create_store_engine
from infersight.storage.migrate import upgrade
from infersight.storage_clickhouse import reads
from infersight.storage_clickhouse.hybrid import HybridStore, Telemetry
from infersight.storage_clickhouse.reads import Sides
from infersight.storage_clickhouse.schema import Layout, migrate
from infersight.storage_clickhouse.transport import ChdbTransport
from tests.conftest import Store
from tests.factories import gateway_span, make_records

DAY = timedelta(days=1)
T0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - 4 * DAY
WHOLE = Window(T0 + timedelta(hours=1, seconds=17.5), T0 + 3 * DAY - timedelta(seconds=41))
FIRST = Window(T0 + timedelta(minutes=3, seconds=5), T0 + timedelta(hours=20, seconds=9))
SECOND = Window(T0 + DAY + timedelta(hours=2), T0 + DAY + timedelta(hours=5, seconds=30))
THIRD = Window(T0 + 2 * DAY + timedelta(hours=1), T0 + 2 * DAY + timedelta(hours=23))
FOLD_VIEWS = ("request_folds", "requests_folded", "requests_current")
MOVE_VIEWS = ("request_moves_", "requests_attributed", "requests_current")


class Recording:
    """The transport, keeping every read's statement."""

    def __init__(self, inner: ChdbTransport) -> None:
        self.inner = inner
        self.statements: list[str] = []

    def rows(self, sql: str) -> list[list[Any]]:
        self.statements.append(sql)
        return self.inner.rows(sql)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _data() -> tuple[list[Any], list[Attribution], list[LateSequence]]:
    rng = np.random.default_rng(3612)
    records = make_records(
        rng, T0, 900, span=3 * DAY, models=("llama-8b", "qwen-7b"), instances=("gpu-0", "gpu-1")
    )
    spans, folds = [], []
    for i, record in enumerate(records):
        day = (record.start - T0) // DAY
        if day == 1 and i % 3 == 0:
            late = dataclasses.replace(
                record,
                span_id=f"{int(record.span_id, 16) ^ (1 << 40):016x}",
                ttft_s=float(record.ttft_s or 0.05) * 1.7,
                output_tokens=int(rng.integers(1, 600)),
            )
            key = (record.start, record.trace_id, record.span_id)
            folds.append(LateSequence(key, late, (late.span_id,)))
        if day == 2 and i % 2 == 0:
            spans.append(
                gateway_span(record, i + 1, tenant="gw-tenant", team=("search", "ads")[i % 2])
            )
    return records, spans, folds


@pytest.fixture(scope="module")
def store(chdb: ChdbTransport, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    layout = Layout(database=f"sides_{uuid.uuid4().hex[:12]}")
    migrate(chdb, layout)
    path: Path = tmp_path_factory.mktemp("sides") / "state.db"
    engine = create_store_engine(f"sqlite:///{path}")
    upgrade(engine)
    recording = Recording(chdb)
    hybrid = HybridStore(Store(str(path), engine).sql, Telemetry(recording, layout))  # type: ignore[arg-type]
    records, spans, folds = _data()
    sink = hybrid.ingest.open_writer()
    for i in range(0, len(records), 300):
        sink.write_requests(records[i : i + 300])
    assert sink.fold_sequences(folds).inserted == len(folds)
    sink.write_attributions(spans)
    assert len(folds) > 30
    assert len(spans) > 60
    yield hybrid, recording
    engine.dispose()
    chdb.command(f"DROP DATABASE IF EXISTS {layout.database}")


def _reads(hybrid: HybridStore, window: Window, selector: Selector, groups: Sequence[str]) -> Any:
    q = hybrid.requests
    step = Resolution.HOUR if window.seconds > 86400 else Resolution.MINUTE
    sli = Sli(SliKind.LATENCY, metric="ttft", threshold_s=0.2)
    return (
        q.latency("ttft", window, selector, groups, method=Method.SKETCH),
        q.latency("e2e", window, selector, groups, method=Method.EXACT),
        q.throughput(window, selector, groups),
        q.breakdown(window, selector, groups),
        q.series(window, step, selector, groups),
        hybrid.events.count(sli, window, selector),
        hybrid.events.count(Sli(SliKind.AVAILABILITY), window, selector),
    )


@pytest.mark.parametrize("window", [WHOLE, FIRST, SECOND, THIRD], ids=["whole", "1", "2", "3"])
@pytest.mark.parametrize(
    ("selector", "groups"),
    [(Selector(), ()), (Selector(), ("team",)), (Selector(team=""), ("model",))],
    ids=["plain", "by-team", "no-team"],
)
def test_the_probed_reads_answer_as_every_view_does(
    store: Any,
    window: Window,
    selector: Selector,
    groups: Sequence[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hybrid, recording = store
    recording.statements.clear()
    probed = _reads(hybrid, window, selector, groups)
    read = " ".join(s for s in recording.statements if "groupUniqArray" not in s)
    with monkeypatch.context() as m:
        m.setattr(reads.Sides, "probe", classmethod(lambda cls, *a: Sides.every()))
        every = _reads(hybrid, window, selector, groups)
    # everything equal; the stage breakdown's float sums to rounding (added in another order)
    assert every[:3] + every[4:] == probed[:3] + probed[4:]
    assert [(b.labels, b.requests) for b in every[3]] == [(b.labels, b.requests) for b in probed[3]]
    for x, y in zip(every[3], probed[3], strict=True):
        assert x.e2e_seconds_total == pytest.approx(y.e2e_seconds_total, rel=1e-12)
        for p, q in zip(x.stages, y.stages, strict=True):
            assert p.seconds_total == pytest.approx(q.seconds_total, rel=1e-12, abs=1e-12)
    assert probed[0].groups
    assert probed[2]
    folds = any(view in read for view in FOLD_VIEWS)
    moves = any(view in read for view in MOVE_VIEWS)
    attributed = bool(selector.items()) or bool(groups)
    assert folds == (window in (WHOLE, SECOND))
    assert moves == (attributed and window in (WHOLE, THIRD))


def test_a_range_the_probe_did_not_see_reads_every_view(store: Any) -> None:
    hybrid, _ = store
    telemetry = hybrid.telemetry
    sides = Sides.probe(telemetry.transport, telemetry.layout, [FIRST])
    assert not sides.moves(FIRST.start, FIRST.end)
    assert not sides.folds(FIRST.start, FIRST.end)
    # the days either side of what it was asked about were probed too; past them, yes
    assert not sides.folds(T0 - DAY, T0)
    assert sides.folds(T0 + DAY, T0 + DAY + timedelta(minutes=1))
    assert sides.moves(T0 - 3 * DAY, T0)
    assert sides.folds(FIRST.start, T0 + 9 * DAY)
    everything = Sides.every()
    assert everything.moves(FIRST.start, FIRST.end)
    assert everything.folds(T0, T0 + DAY)
