"""The request sink for ClickHouse: large inserts, each request stored once.

A batch is split by day (one partition each: ClickHouse commits an insert of one block into one
partition atomically) and into chunks of at most ``CHUNK`` rows. For each chunk:

1. the keys (start, trace id, span id) already stored are read and dropped — a replayed batch
   stores nothing the second time;
2. the minute rollup rows of the rest are inserted, then the rest itself, each with an insert
   deduplication token made from the fresh keys (``insert_deduplication_token``, with
   ``deduplicate_blocks_in_dependent_materialized_views`` for the hour and day views).

A crash between 2's two inserts is repaired by a replay of the same records: the keys are
still not stored, so the same fresh set gives the same token, the rollups' insert is recognised
as done, and the requests are inserted. A replay that carries more records (the sidecar's spool
reads its oldest ready entries up to its batch size, and more became ready since) has another
fresh set and token: the first attempt's requests are then counted twice in the rollups
(docs/past-one-primary.md says what fixes it). The batch is acknowledged (returned) only when
both are stored; an error raises ``Unavailable`` and the sidecar keeps its spool.

What this does not cover: two writers racing on the same key at the same moment (the raw row
is then stored twice until a merge, and reads use ``FINAL``; its rollups would count it twice).
One sidecar ships its own instance's spans one batch at a time, so its keys are never raced.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from operator import attrgetter
from typing import Any, Final

import numpy as np

try:
    import orjson
except ImportError:  # pragma: no cover - orjson comes with the sidecar and server extras
    orjson = None  # type: ignore[assignment]

from infersight.core.accept import AcceptWindow
from infersight.core.errors import InvalidInput
from infersight.core.records import (
    DURATION_FIELDS,
    GROUP_LABELS,
    RECORD_FIELDS,
    RequestRecord,
    Role,
    Status,
)
from infersight.core.sketch import DEFAULT_RELATIVE_ACCURACY, MIN_VALUE, QuantileSketch
from infersight.core.write import WriteResult
from infersight.storage_clickhouse.schema import METRICS, Layout, rollup_columns
from infersight.storage_clickhouse.transport import Transport, quote

log = logging.getLogger(__name__)

#: Rows per insert (one block, one part): large, as ClickHouse wants them, and bounded.
CHUNK: Final = 200_000
#: Keys looked up per statement (about 40 bytes each in the statement's text).
LOOKUP: Final = 2_000
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO: Final = timedelta(microseconds=1)
#: Bucket keys fit in ±2**20 (``core.sketch``'s bound on keys); a (group, key) pair packs into
#: one int64 for counting.
_KEY_OFFSET: Final = 1 << 20
_KEY_SPAN: Final = 1 << 21


def micros(ts: datetime) -> int:
    """``ts`` as microseconds since the epoch (exact)."""
    return (ts - _EPOCH) // _MICRO


def _text(ts: datetime) -> str:
    return f"{ts.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}"


def _key(record: RequestRecord) -> tuple[int, str, str]:
    return micros(record.start), record.trace_id, record.span_id


_START: Final = RECORD_FIELDS.index("start")


_FIELDS: Final = attrgetter(*RECORD_FIELDS)


def raw_rows(records: Iterable[RequestRecord]) -> list[list[Any]]:
    """``records`` as rows of ``requests`` (``RECORD_FIELDS`` order)."""
    out = []
    for record in records:
        row: list[Any] = list(_FIELDS(record))
        row[_START] = _text(record.start)
        out.append(row)
    return out


def payload(rows: Iterable[Sequence[Any]]) -> bytes:
    """Rows as ``JSONCompactEachRow`` (floats written so that they read back to the bit)."""
    if orjson is not None:
        return b"\n".join(map(orjson.dumps, rows)) + b"\n"
    return "".join(json.dumps(row, allow_nan=False) + "\n" for row in rows).encode()


def rollup_rows(records: Sequence[RequestRecord]) -> list[list[Any]]:
    """The minute rollup rows of ``records``, in ``schema.rollup_columns`` order: per series and
    minute the counts, and per latency metric its sketch's buckets (keys from
    ``QuantileSketch.keys_for``: PostgreSQL's rollups hold the same), zero count, sum, min and
    max."""
    index: dict[tuple[Any, ...], int] = {}
    ids = np.fromiter(
        (
            index.setdefault(
                (*(getattr(r, n) for n in GROUP_LABELS), micros(r.start) // 60_000_000),
                len(index),
            )
            for r in records
        ),
        dtype=np.int64,
        count=len(records),
    )
    n = len(index)
    errors = np.bincount(
        ids, weights=[r.status is Status.ERROR for r in records], minlength=n
    ).astype(np.int64)
    counts = np.bincount(ids, minlength=n)
    tokens = {
        name: np.bincount(
            ids, weights=[getattr(r, name) or 0 for r in records], minlength=n
        ).astype(np.int64)
        for name in ("input_tokens", "output_tokens", "cached_tokens")
    }
    template = QuantileSketch(DEFAULT_RELATIVE_ACCURACY)
    metric_columns: list[list[Any]] = []
    for field in DURATION_FIELDS:
        values = np.fromiter(
            (np.nan if (v := getattr(r, field)) is None else v for r in records),
            dtype=np.float64,
            count=len(records),
        )
        present = ~np.isnan(values)
        gids, vals = ids[present], values[present]
        positive = vals >= MIN_VALUE
        zero = np.bincount(gids[~positive], minlength=n)
        total = np.bincount(gids, weights=vals, minlength=n)
        low = np.full(n, np.inf)
        high = np.full(n, -np.inf)
        np.minimum.at(low, gids, vals)
        np.maximum.at(high, gids, vals)
        buckets: list[dict[str, int]] = [{} for _ in range(n)]
        if positive.any():
            keys = template.keys_for(vals[positive])
            if keys.min() <= -_KEY_OFFSET or keys.max() >= _KEY_OFFSET:
                raise InvalidInput(f"{field} holds a value outside the sketch's range")
            packed = gids[positive] * _KEY_SPAN + (keys + _KEY_OFFSET)
            pairs, amounts = np.unique(packed, return_counts=True)
            for pair, amount in zip(pairs.tolist(), amounts.tolist(), strict=True):
                group, key = divmod(pair, _KEY_SPAN)
                buckets[group][str(key - _KEY_OFFSET)] = amount
        held = np.bincount(gids, minlength=n) > 0
        metric_columns.append(
            [
                [
                    buckets[g],
                    int(zero[g]),
                    float(total[g]),
                    float(low[g]) if held[g] else None,
                    float(high[g]) if held[g] else None,
                ]
                for g in range(n)
            ]
        )
    rows = []
    for (*labels, minute), g in index.items():
        row: list[Any] = [f"{datetime.fromtimestamp(minute * 60, UTC):%Y-%m-%d %H:%M:%S}"]
        row += labels
        row += [int(counts[g]), int(errors[g])]
        row += [int(tokens[name][g]) for name in ("input_tokens", "output_tokens", "cached_tokens")]
        for column in metric_columns:
            row += column[g]
        rows.append(row)
    return rows


_ROLLUP_NAMES: Final = tuple(name for name, _ in rollup_columns())
assert len(rollup_columns()) == 1 + len(GROUP_LABELS) + 5 + 5 * len(METRICS)


class ClickHouseWriter:
    """Request records into ClickHouse: ``core.write.Sink``'s ``write_requests``; samples and
    client records stay the SQL store's in this slice (``hybrid.HybridSink``)."""

    def __init__(
        self,
        transport: Transport,
        layout: Layout,
        accept: AcceptWindow | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.transport = transport
        self.layout = layout
        self.accept = accept
        self.clock = clock or (lambda: datetime.now(UTC))

    def _accepted(self, records: Sequence[RequestRecord]) -> Sequence[RequestRecord]:
        if self.accept is None:
            return records
        low, high = self.accept.bounds(self.clock())
        return [r for r in records if low <= r.start <= high]

    def write_requests(self, records: Sequence[RequestRecord]) -> WriteResult:
        """Store the user requests of ``records``, each key once: ``inserted + duplicates +
        refused == received``, counting user requests only (prefill legs of disaggregated
        requests are the SQL store's in this slice, and left out of the answer)."""
        users_in = [r for r in records if r.role is not Role.PREFILL]
        received = len(users_in)
        users = self._accepted(users_in)
        refused = received - len(users)
        unique: dict[tuple[int, str, str], RequestRecord] = {}
        for record in users:
            unique.setdefault(_key(record), record)
        by_day: dict[date, list[RequestRecord]] = defaultdict(list)
        for record in unique.values():
            by_day[record.start.astimezone(UTC).date()].append(record)
        inserted = 0
        for day in sorted(by_day):
            rows = by_day[day]
            for i in range(0, len(rows), CHUNK):
                inserted += self._store_chunk(rows[i : i + CHUNK])
        return WriteResult(received, inserted, len(users) - inserted, refused)

    def _stored_keys(self, records: Sequence[RequestRecord]) -> set[tuple[int, str, str]]:
        """The keys of ``records`` already stored, looked up ``LOOKUP`` keys a statement (a
        statement stays far below ClickHouse's ``max_query_size``), each within its keys' time
        range, models and instances (the table's order)."""
        out: set[tuple[int, str, str]] = set()
        ordered = sorted(records, key=_key)
        if not self._any_stored(ordered):
            return out
        for i in range(0, len(ordered), LOOKUP):
            part = ordered[i : i + LOOKUP]
            models = ", ".join(quote(m) for m in sorted({r.model for r in part}))
            instances = ", ".join(quote(m) for m in sorted({r.instance for r in part}))
            spans = ", ".join(f"({quote(r.trace_id)}, {quote(r.span_id)})" for r in part)
            rows = self.transport.rows(
                "SELECT toUnixTimestamp64Micro(start), trace_id, span_id"
                f" FROM {self.layout.table('requests')}"
                f" WHERE model IN ({models}) AND instance IN ({instances})"
                f" AND start >= {quote(_text(part[0].start))}"
                f" AND start <= {quote(_text(part[-1].start))}"
                f" AND (trace_id, span_id) IN ({spans})"
            )
            out.update((int(m), t, s) for m, t, s in rows)
        return out

    def _any_stored(self, ordered: Sequence[RequestRecord]) -> bool:
        """Whether any request of the records' models and instances is stored in their time
        range (one cheap count; a sidecar's fresh batch usually meets none)."""
        models = ", ".join(quote(m) for m in sorted({r.model for r in ordered}))
        instances = ", ".join(quote(m) for m in sorted({r.instance for r in ordered}))
        rows = self.transport.rows(
            f"SELECT count() FROM {self.layout.table('requests')}"
            f" WHERE model IN ({models}) AND instance IN ({instances})"
            f" AND start >= {quote(_text(ordered[0].start))}"
            f" AND start <= {quote(_text(ordered[-1].start))}"
        )
        return bool(rows and rows[0][0])

    def _store_chunk(self, records: Sequence[RequestRecord]) -> int:
        stored = self._stored_keys(records)
        fresh = [r for r in records if _key(r) not in stored] if stored else list(records)
        if not fresh:
            return 0
        digest = hashlib.sha256()
        for key in sorted(_key(r) for r in fresh):
            digest.update(f"{key[0]}/{key[1]}/{key[2]};".encode())
        token = digest.hexdigest()
        settings: dict[str, Any] = {
            "deduplicate_blocks_in_dependent_materialized_views": 1,
            "input_format_parallel_parsing": 0,
            "max_insert_block_size": CHUNK * 2,
            "min_insert_block_size_rows": 0,
            "min_insert_block_size_bytes": 0,
        }
        if self.layout.cluster:
            settings["distributed_foreground_insert"] = 1
        self.transport.insert(
            self.layout.table("request_rollups_1m"),
            _ROLLUP_NAMES,
            payload(rollup_rows(fresh)),
            {**settings, "insert_deduplication_token": "r" + token},
        )
        self.transport.insert(
            self.layout.table("requests"),
            RECORD_FIELDS,
            payload(raw_rows(fresh)),
            {**settings, "insert_deduplication_token": "q" + token},
        )
        return len(fresh)
