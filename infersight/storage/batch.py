"""A batch of request records held as columns: the shape the writer and the rollups work on.

The writer needs the same batch three ways: rows for ``COPY``, columns for the vectorised
rollup deltas, and natural keys for de-duplication. Reading each field once per batch into a
list (one C-level ``map`` per field) and zipping rows out of the columns only while ``COPY``
streams them avoids materialising a tuple per record and then transposing the tuples back;
at ingest rates that allocation churn, and the garbage-collector passes it triggers, cost
more than the database does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from operator import attrgetter, itemgetter
from typing import Any, Final

from infersight.core.records import RECORD_FIELDS, RequestRecord

Key = tuple[str, str]
_GETTERS: Final = tuple(attrgetter(name) for name in RECORD_FIELDS)
_TRACE_AT: Final = RECORD_FIELDS.index("trace_id")
_SPAN_AT: Final = RECORD_FIELDS.index("span_id")
#: A batch spanning more days than this lists only the days it really touches.
_MAX_SPAN_DAYS: Final = 7


@dataclass(frozen=True, slots=True)
class Batch:
    """Records as one list per field, in ``RECORD_FIELDS`` order, one entry per natural key."""

    columns: tuple[list[Any], ...]

    @classmethod
    def of(cls, records: Sequence[RequestRecord]) -> Batch:
        """The batch of ``records``; a key repeated within them keeps its last copy."""
        batch = cls.verbatim(records)
        # Trace ids are nearly always unique per request: a set of strings proves the keys
        # unique without building a tuple per record (tuples would also wake the collector).
        if len(set(batch.columns[_TRACE_AT])) == len(batch):
            return batch
        keys = batch.keys()
        last = dict(zip(keys, range(len(keys)), strict=True))
        if len(last) == len(keys):
            return batch
        return batch.take(sorted(last.values()))

    @classmethod
    def verbatim(cls, records: Sequence[RequestRecord]) -> Batch:
        """``records`` as columns, as they are (a repeated key stays repeated)."""
        return cls(tuple(list(map(getter, records)) for getter in _GETTERS))

    def __len__(self) -> int:
        return len(self.columns[0])

    def fields(self) -> dict[str, list[Any]]:
        """The columns by field name."""
        return dict(zip(RECORD_FIELDS, self.columns, strict=True))

    def column(self, name: str) -> list[Any]:
        return self.columns[RECORD_FIELDS.index(name)]

    def rows(self) -> Iterator[tuple[Any, ...]]:
        """Row tuples in ``RECORD_FIELDS`` order, made one at a time."""
        return zip(*self.columns, strict=True)

    def keys(self) -> list[Key]:
        return list(zip(self.columns[_TRACE_AT], self.columns[_SPAN_AT], strict=True))

    def take(self, indices: Sequence[int]) -> Batch:
        """The rows at ``indices``, in that order."""
        if not indices:
            return Batch(tuple([] for _ in self.columns))
        pick = itemgetter(*indices)
        if len(indices) == 1:
            return Batch(tuple([pick(column)] for column in self.columns))
        return Batch(tuple(list(pick(column)) for column in self.columns))

    def without(self, keys: set[Key]) -> Batch:
        """The batch less the rows whose natural key is in ``keys``."""
        return self.take([i for i, key in enumerate(self.keys()) if key not in keys])

    def only(self, keys: set[Key]) -> Batch:
        """The rows whose natural key is in ``keys``.

        A replay stores nothing: an empty ``keys`` answers at once instead of building and
        probing a key tuple per row (a tenth of a replayed batch's time)."""
        if not keys:
            return self.take([])
        return self.take([i for i, key in enumerate(self.keys()) if key in keys])

    def days(self) -> set[date]:
        """The UTC days the batch touches, from its earliest and latest start."""
        return days_of(self.column("start"))


def days_of(starts: Sequence[datetime]) -> set[date]:
    """The UTC days ``starts`` touch, from the earliest and the latest."""
    first = min(starts).astimezone(UTC).date()
    last = max(starts).astimezone(UTC).date()
    if (last - first).days > _MAX_SPAN_DAYS:  # a stray old record: only the days present
        return {ts.astimezone(UTC).date() for ts in starts}
    return {first + timedelta(days=i) for i in range((last - first).days + 1)}
