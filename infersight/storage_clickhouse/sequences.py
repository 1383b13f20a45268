"""Late sequences folded in ClickHouse: a request's parallel-sampling sequences that came after
it was stored, folded into it as the SQL store folds them (``storage.writer``'s
``fold_sequences``, ``core.sequences.fold_late_sequence``), each sequence once
(``sequences_schema`` has the tables and views).

A stored row cannot be rewritten, nor its rollups corrected in place (``attribution``: the
same reasons), so a fold is a *state*: the request as folded, beside the values it was rolled
up with and the sequences claimed for it, one ``request_folds`` row per request, the newest
version winning. Raw reads read ``requests`` through the views that put the folded values in
(``requests_folded``, ``requests_current``); rollup reads add the fold views' rows (``-1`` the
stored values, ``+1`` the folded ones, in the series the request is in: its move's when
attribution moved it).

* **Exactly once.** A fold's claims and its state are one row, inserted at once: a replay
  finds every member claimed and folds nothing (a duplicate); a record some of whose members
  were claimed before is not folded and its fresh members are claimed (the SQL store's
  ``request_sequences`` keeps them the same way). A record whose request is not stored (or
  with which it would be implausible) is stored as a request of its own, its members not
  claimed, as the SQL writer does.
* **In order.** Folds of one request are applied in the order they came, each from the state
  the previous left (``fold_late_sequence`` is not associative), within a batch as across
  batches — the order in which the hybrid sink gives both stores the same batches.
* **Bounds.** Every value set a request held is marked (``request_fold_marks``) in the series
  it held it in, before the new state is written (a replay cut off between marks the same
  values again), so a series' minimum and maximum hold every value its requests had, as the
  SQL store's rollups do (``QuantileSketch.subtract`` leaves them) — except where one fold
  batch took every request of a SQL rollup row out at once: that row forgets its bounds before
  the folded values go in, and ClickHouse's (``SimpleAggregateFunction(min)``/``max``) cannot;
  and where a request was moved after it was folded (the move's ``+1`` row carries its stored
  values into its attributed series, where the SQL store's moved the folded ones). There the
  bounds hold the SQL store's and the values it forgot, and a sketch quantile can
  differ from the SQL store's in its last digits, each within the sketch's relative accuracy
  of the values it answers for (counts, buckets, sums and exact quantiles are equal).

Not covered, as for the request writer: two writers folding into the same request at the same
moment (the SQL store locks the row; here the later state wins). One sidecar ships its own
instance's sequences one batch at a time.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from infersight.core.attribution import DIMENSIONS
from infersight.core.records import DURATION_FIELDS, GROUP_LABELS, RECORD_FIELDS, RequestRecord
from infersight.core.sequences import LateSequence, fold_late_sequence
from infersight.core.write import WriteResult
from infersight.storage_clickhouse.attribution_schema import ROW_COLUMNS
from infersight.storage_clickhouse.layout import Layout
from infersight.storage_clickhouse.sequences_schema import (
    FOLD_COLUMNS,
    FOLD_MARK_COLUMNS,
    WAS_COLUMNS,
)
from infersight.storage_clickhouse.transport import Transport, quote
from infersight.storage_clickhouse.writer import ClickHouseWriter, micros, payload, stored_rows

log = logging.getLogger(__name__)

#: Requests looked up per statement.
_CHUNK: Final = 2_000
Key = tuple[int, str, str]
_WAS_AT: Final = tuple(ROW_COLUMNS.index(c) for c in WAS_COLUMNS)
_DIMENSION_AT: Final = tuple(ROW_COLUMNS.index(d) for d in DIMENSIONS)
_MEMBERS_AT: Final = FOLD_COLUMNS.index("members")
_FOLDED_AT: Final = FOLD_COLUMNS.index("folded")
_VERSION_AT: Final = FOLD_COLUMNS.index("version")
_RECORD_FIELDS_N: Final = len(RECORD_FIELDS)
_START_AT: Final = RECORD_FIELDS.index("start")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def _text(ts: datetime) -> str:
    return f"{ts.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}"


def _at(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def _key(request: tuple[datetime, str, str]) -> Key:
    return micros(request[0]), request[1], request[2]


def _record(row: Sequence[Any]) -> RequestRecord:
    """A stored row (``ROW_COLUMNS`` order: ``RECORD_FIELDS`` first) as the record it holds."""
    values = list(row[:_RECORD_FIELDS_N])
    values[_START_AT] = datetime.fromisoformat(str(values[_START_AT])).replace(tzinfo=UTC)
    return RequestRecord.trusted(values)


def _row(record: RequestRecord, token: str) -> list[Any]:
    """``record`` as a row of ``ROW_COLUMNS`` (with its values' bucket keys)."""
    return stored_rows([record], token)[0]


class SequenceWriter:
    """Late sequences into ``request_folds`` (and, for a record whose request is not stored,
    into ``requests`` as a request of its own)."""

    def __init__(
        self, transport: Transport, layout: Layout, clock: Callable[[], datetime] | None = None
    ) -> None:
        self.transport = transport
        self.layout = layout
        self.clock = clock or (lambda: datetime.now(UTC))
        # No accept window: the SQL writer stores a fold's record alone without one too.
        self._requests = ClickHouseWriter(transport, layout)

    # -- lookups -----------------------------------------------------------------------------

    def _select(self, table: str, columns: str, keys: Iterable[Key]) -> dict[Key, list[Any]]:
        """``columns`` of ``table``'s rows (``FINAL``) of ``keys``, by key."""
        wanted = sorted(set(keys))
        out: dict[Key, list[Any]] = {}
        for i in range(0, len(wanted), _CHUNK):
            part = wanted[i : i + _CHUNK]
            want = set(part)
            low, high = _at(part[0][0]), _at(part[-1][0])
            pairs = ", ".join(f"({quote(t)}, {quote(s)})" for _, t, s in part)
            rows = self.transport.rows(
                f"SELECT toUnixTimestamp64Micro(start), trace_id, span_id, {columns}"
                f" FROM {self.layout.table(table)} FINAL"
                f" WHERE start >= {quote(_text(low))}"
                f" AND start <= {quote(_text(high))}"
                f" AND (trace_id, span_id) IN ({pairs})"
            )
            for row in rows:
                key = (int(row[0]), str(row[1]), str(row[2]))
                if key in want:
                    out[key] = list(row[3:])
        return out

    def states(self, keys: Iterable[Key]) -> dict[Key, list[Any]]:
        """The ``request_folds`` rows (``FOLD_COLUMNS``) of ``keys``."""
        return self._select("request_folds", ", ".join(FOLD_COLUMNS), keys)

    def _stored(self, keys: Iterable[Key]) -> dict[Key, list[Any]]:
        return self._select("requests", ", ".join(ROW_COLUMNS), keys)

    def _moved(self, keys: Iterable[Key]) -> dict[Key, list[str]]:
        """The attributed labels (``DIMENSIONS``) of the moved requests among ``keys``."""
        rows = self._select("request_moves", ", ".join(DIMENSIONS), keys)
        return {k: [str(v or "") for v in row] for k, row in rows.items()}

    def folded(self, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of ``keys`` (trace id, span id) are sequences claimed for a stored request
        (the SQL writer's ``folded``: a sidecar that restarted asks before shipping records
        it had spooled, so that a sequence folded just before a crash is not stored again)."""
        wanted = sorted(set(keys))
        out: set[tuple[str, str]] = set()
        for i in range(0, len(wanted), _CHUNK):
            part = wanted[i : i + _CHUNK]
            traces = ", ".join(quote(t) for t in sorted({t for t, _ in part}))
            pairs = ", ".join(f"({quote(t)}, {quote(s)})" for t, s in part)
            rows = self.transport.rows(
                f"SELECT trace_id, member FROM {self.layout.table('request_folds')} FINAL"
                f" ARRAY JOIN members AS member WHERE trace_id IN ({traces})"
                f" AND (trace_id, member) IN ({pairs})"
            )
            out.update((str(t), str(m)) for t, m in rows)
        return out

    # -- folding -----------------------------------------------------------------------------

    def fold(self, late: Sequence[LateSequence]) -> WriteResult:
        """Fold ``late`` into the stored requests (``inserted``: the records folded, or stored
        as requests of their own; a record already folded, or partly, is a duplicate)."""
        received = len(late)
        if not late:
            return WriteResult(0, 0, 0)
        keys = {_key(f.request) for f in late}
        old = self.states(keys)
        claimed: dict[Key, set[str]] = {k: set(row[_MEMBERS_AT]) for k, row in old.items()}
        fresh = {
            (_key(f.request), m)
            for f in late
            for m in f.members
            if m not in claimed.get(_key(f.request), ())
        }
        mine = [f for f in late if all((_key(f.request), m) in fresh for m in f.members)]
        partial = [
            f
            for f in late
            if f not in mine and any((_key(f.request), m) in fresh for m in f.members)
        ]
        if partial:
            log.warning(
                "%d late sequence records partly folded before: not added again", len(partial)
            )
        stored = self._stored({_key(f.request) for f in mine})
        current_of: dict[Key, RequestRecord] = {}
        for k, row in old.items():
            if row[_FOLDED_AT]:
                current_of[k] = _record(row)
        news: dict[Key, RequestRecord] = {}
        held: dict[Key, list[RequestRecord]] = defaultdict(list)
        alone: list[RequestRecord] = []
        folded = 0
        for f in mine:
            k = _key(f.request)
            current = news.get(k) or current_of.get(k)
            if current is None and k in stored:
                current = _record(stored[k])
            merged = None if current is None else fold_late_sequence(current, f.record)
            if current is None or merged is None:
                alone.append(f.record)
                continue
            held[k] += [current, merged]
            news[k] = merged
            folded += 1
        for f in late:
            claimed.setdefault(_key(f.request), set()).update(f.members)
        for f in mine:
            if f.record in alone:
                claimed[_key(f.request)].difference_update(f.members)
        duplicates = received - len(mine)
        self._mark(held, stored)
        if alone:
            result = self._requests.write_requests(alone)
            folded += result.inserted
            duplicates += len(alone) - result.inserted
        self._store(late, old, claimed, news, stored)
        return WriteResult(received, folded, duplicates)

    def _mark(self, held: dict[Key, list[RequestRecord]], stored: dict[Key, list[Any]]) -> None:
        """Mark each value set the requests held in this batch, in the series they are in."""
        if not held:
            return
        moved = self._moved(held)
        version = micros(self.clock())
        rows = []
        for k, states in held.items():
            row = stored[k]
            at = moved.get(k) or [str(row[i] or "") for i in _DIMENSION_AT]
            for n, state in enumerate(states):
                rows.append(
                    [
                        _text(state.start),
                        state.trace_id,
                        state.span_id,
                        *(str(row[ROW_COLUMNS.index(name)] or "") for name in GROUP_LABELS),
                        *at,
                        *(getattr(state, name) for name in DURATION_FIELDS),
                        version + n,
                    ]
                )
        self.transport.insert(
            self.layout.table("request_fold_marks"), FOLD_MARK_COLUMNS, payload(rows), {}
        )

    def _store(
        self,
        late: Sequence[LateSequence],
        old: dict[Key, list[Any]],
        claimed: dict[Key, set[str]],
        news: dict[Key, RequestRecord],
        stored: dict[Key, list[Any]],
    ) -> None:
        """The new state of every request whose claims or values changed: its folded row
        (or its old one), what it was stored with, and its claims, in one insert."""
        now = micros(self.clock())
        records = {_key(f.request): f for f in late}
        rows = []
        for k in sorted(records):
            members = sorted(claimed.get(k, ()))
            before = old.get(k)
            if k not in news and (before is None and not members):
                continue
            if k not in news and before is not None and sorted(before[_MEMBERS_AT]) == members:
                continue
            version = max(now, int(before[_VERSION_AT]) + 1 if before is not None else 0)
            if k in news:
                base = stored[k]
                row = [
                    *_row(news[k], str(base[-1])),
                    *(base[i] for i in _WAS_AT),
                    members,
                    1,
                    version,
                ]
            elif before is not None:
                row = [*before[:_MEMBERS_AT], members, before[_FOLDED_AT], version]
            else:
                # Claims for a request not folded (a partly replayed record): its stored row,
                # or (not stored) the record under the request's key.
                if k in stored:
                    base = stored[k]
                else:
                    fold = records[k]
                    record = replace(fold.record, start=fold.request[0], span_id=k[2])
                    base = _row(record, "")
                row = [*base, *(base[i] for i in _WAS_AT), members, 0, version]
            rows.append(row)
        if rows:
            self.transport.insert(
                self.layout.table("request_folds"), FOLD_COLUMNS, payload(rows), {}
            )


__all__ = ["SequenceWriter"]
