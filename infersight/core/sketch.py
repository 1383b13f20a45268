"""A mergeable quantile sketch with a guaranteed relative error.

The mapping is DDSketch's logarithmic one (Masson, Rim & Lee, VLDB 2019): a positive value
``x`` falls in bucket ``i = ⌈log_γ x⌉`` with ``γ = (1+α)/(1−α)``, and every value in bucket ``i``
lies within ``α`` (relative) of the bucket's representative ``2γ^i/(γ+1)``. Buckets are kept
sparse (sorted keys and counts in numpy arrays), so adding a batch and merging sketches are a
few vectorised operations; that is why this is not the ``ddsketch`` package, which adds one
value at a time in Python and answers with the nearest rank only.

Quantiles interpolate between the representatives of ranks ``⌊h⌋`` and ``⌈h⌉`` (``h = q·(n−1)``),
exactly as numpy's and PostgreSQL's exact answers do. A convex combination of two values that
are each within ``α`` of the truth is itself within ``α`` of the interpolated truth, so the
answer is within ``α`` of the *exact interpolated* quantile, not merely of some nearby rank.

Values below ``MIN_VALUE`` (1 ns, for latencies in seconds) are counted as exactly zero.
Negative values are rejected: every quantity infersight sketches is a duration or a count.

Serialisation is a versioned little-endian header followed by the zlib-compressed bucket arrays.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Iterable, Sequence
from typing import Final, Self

import numpy as np
import numpy.typing as npt

from infersight.core.errors import InvalidInput

DEFAULT_RELATIVE_ACCURACY: Final = 0.01
MIN_VALUE: Final = 1e-9
_MAGIC: Final = b"ISK1"  # bucket arrays zlib-compressed
_MAGIC_RAW: Final = b"ISK0"  # bucket arrays stored as they are (small sketches)
_COMPRESS_ABOVE: Final = 256  # bytes of bucket arrays
_ZERO_KEY: Final = np.iinfo(np.int64).min
_HEADER: Final = struct.Struct("<4sdQQdddI")  # magic, alpha, count, zero, sum, min, max, nkeys
_MAX_KEYS: Final = 1 << 20
#: Quantile answers a sketch remembers at most (a page asks four or five).
_MEMO_MAX: Final = 32

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class QuantileSketch:
    """Counts of values in logarithmic buckets, plus exact count, sum, min and max."""

    __slots__ = (
        "_counts",
        "_keys",
        "_ln_gamma",
        "_memo",
        "alpha",
        "count",
        "max",
        "min",
        "sum",
        "zero_count",
    )

    def __init__(self, alpha: float = DEFAULT_RELATIVE_ACCURACY) -> None:
        if not 0.0 < alpha < 0.5:
            raise InvalidInput(
                "sketch relative accuracy must be in (0, 0.5)", details={"alpha": alpha}
            )
        self.alpha = alpha
        self._ln_gamma = math.log((1.0 + alpha) / (1.0 - alpha))
        self._keys: IntArray = np.empty(0, dtype=np.int64)
        self._counts: IntArray = np.empty(0, dtype=np.int64)
        self.count = 0
        self.zero_count = 0
        self.sum = 0.0
        self.min = math.inf
        self.max = -math.inf
        self._memo: dict[float, float] = {}

    # -- building ---------------------------------------------------------------------------

    @classmethod
    def of(cls, values: Iterable[float], alpha: float = DEFAULT_RELATIVE_ACCURACY) -> Self:
        sketch = cls(alpha)
        sketch.add_many(np.fromiter(values, dtype=np.float64))
        return sketch

    def add(self, value: float) -> None:
        self.add_many(np.array([value], dtype=np.float64))

    def add_many(self, values: Sequence[float] | FloatArray) -> None:
        """Add a batch of values (NaN is refused, negative values too)."""
        array = np.asarray(values, dtype=np.float64)
        if array.size == 0:
            return
        self._memo = {}
        if not np.all(np.isfinite(array)) or np.any(array < 0.0):
            raise InvalidInput("sketch values must be finite and non-negative")
        positive = array[array >= MIN_VALUE]
        self.zero_count += int(array.size - positive.size)
        if positive.size:
            keys = self.keys_for(positive)
            unique, counts = np.unique(keys, return_counts=True)
            self._merge_buckets(unique, counts.astype(np.int64))
        self.count += int(array.size)
        self.sum += float(array.sum())
        self.min = min(self.min, float(array.min()))
        self.max = max(self.max, float(array.max()))

    def keys_for(self, positive: FloatArray) -> IntArray:
        """Bucket keys of values that are all ≥ ``MIN_VALUE``."""
        return np.ceil(np.log(positive) / self._ln_gamma).astype(np.int64)

    @classmethod
    def from_buckets(
        cls,
        keys: IntArray,
        counts: IntArray,
        *,
        zero_count: int,
        total: float,
        minimum: float,
        maximum: float,
        alpha: float = DEFAULT_RELATIVE_ACCURACY,
    ) -> Self:
        """Assemble a sketch from sorted unique ``keys`` (as ``keys_for`` computes) and counts."""
        sketch = cls(alpha)
        sketch._keys = np.asarray(keys, dtype=np.int64)
        sketch._counts = np.asarray(counts, dtype=np.int64)
        sketch.zero_count = int(zero_count)
        sketch.count = int(sketch._counts.sum()) + sketch.zero_count
        sketch.sum = float(total)
        sketch.min = float(minimum) if sketch.count else math.inf
        sketch.max = float(maximum) if sketch.count else -math.inf
        return sketch

    def merge(self, other: QuantileSketch) -> None:
        """Fold ``other`` into this sketch; the result equals one sketch over both inputs."""
        if other.alpha != self.alpha:
            raise InvalidInput(
                "cannot merge sketches of different accuracy",
                details={"left": self.alpha, "right": other.alpha},
            )
        if other.count == 0:
            return
        self._memo = {}
        self._merge_buckets(other._keys, other._counts)
        self.count += other.count
        self.zero_count += other.zero_count
        self.sum += other.sum
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    def subtract(self, other: QuantileSketch) -> None:
        """Take back values ``other`` holds that were merged or added here before (a stored
        request corrected: its old values out, its new ones in). Counts, buckets and the sum
        are exact afterwards; ``min`` and ``max`` stay as they were (still bounds of the values
        left, perhaps no longer reached). Values never held are refused."""
        if other.alpha != self.alpha:
            raise InvalidInput(
                "cannot subtract sketches of different accuracy",
                details={"left": self.alpha, "right": other.alpha},
            )
        if other.count == 0:
            return
        at = np.searchsorted(self._keys, other._keys)
        inside = at < self._keys.size
        held = inside & (self._keys[np.minimum(at, max(self._keys.size - 1, 0))] == other._keys)
        if (
            not bool(np.all(held))
            or other.zero_count > self.zero_count
            or bool(np.any(self._counts[at] < other._counts))
        ):
            raise InvalidInput("cannot subtract values a sketch does not hold")
        self._memo = {}
        counts = self._counts.copy()
        counts[at] -= other._counts
        keep = counts > 0
        self._keys, self._counts = self._keys[keep], counts[keep]
        self.count -= other.count
        self.zero_count -= other.zero_count
        self.sum = max(self.sum - other.sum, 0.0)
        if self.count == 0:
            self.min, self.max, self.sum = math.inf, -math.inf, 0.0

    def _merge_buckets(self, keys: IntArray, counts: IntArray) -> None:
        if keys.size == 0:
            return
        if self._keys.size == 0:
            self._keys, self._counts = keys.copy(), counts.copy()
            return
        all_keys = np.concatenate((self._keys, keys))
        all_counts = np.concatenate((self._counts, counts))
        unique, inverse = np.unique(all_keys, return_inverse=True)
        merged = np.bincount(inverse, weights=all_counts, minlength=unique.size)
        self._keys, self._counts = unique, np.rint(merged).astype(np.int64)

    def copy(self) -> QuantileSketch:
        clone = QuantileSketch(self.alpha)
        clone.merge(self)
        return clone

    # -- answering --------------------------------------------------------------------------

    @property
    def relative_error(self) -> float:
        return self.alpha

    @property
    def buckets(self) -> int:
        """How many buckets hold values (what the sketch's size grows with)."""
        return int(self._keys.size)

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    def _value_at_ranks(self, ranks: IntArray) -> FloatArray:
        """Representative values of 0-based ranks, clamped into [min, max]."""
        cumulative = self.zero_count + np.cumsum(self._counts)
        idx = np.searchsorted(cumulative, ranks, side="right")
        gamma = math.exp(self._ln_gamma)
        safe_idx = np.minimum(idx, max(self._keys.size - 1, 0))
        reps = (
            2.0 * np.exp(self._keys[safe_idx] * self._ln_gamma) / (gamma + 1.0)
            if self._keys.size
            else np.zeros(ranks.size)
        )
        values = np.where(ranks < self.zero_count, 0.0, reps)
        return np.clip(values, max(self.min, 0.0), self.max)

    def quantiles(self, quantiles: Sequence[float]) -> dict[float, float]:
        """Estimated quantiles; empty when the sketch holds no value.

        Answers are remembered until the sketch changes (``add_many``, ``merge``): a merged
        sketch that a cache keeps (``storage.sketch_cache``) is asked the same quantiles by
        every page view, and each answer costs a cumulative sum over its buckets.
        """
        if self.count == 0:
            return {}
        wanted = [float(q) for q in quantiles]
        memo = self._memo
        if all(q in memo for q in wanted):
            return {q: memo[q] for q in wanted}
        qs = np.asarray(wanted, dtype=np.float64)
        h = qs * (self.count - 1)
        lo = np.floor(h).astype(np.int64)
        hi = np.minimum(lo + 1, self.count - 1)
        lo_values = self._value_at_ranks(lo)
        hi_values = self._value_at_ranks(hi)
        result = lo_values + (h - lo) * (hi_values - lo_values)
        # The extremes are known exactly.
        result = np.where(qs == 0.0, self.min, np.where(qs == 1.0, self.max, result))
        answers = {float(q): float(v) for q, v in zip(qs, result, strict=True)}
        if len(memo) < _MEMO_MAX:
            memo.update(answers)
        return answers

    def quantile(self, q: float) -> float | None:
        return self.quantiles([q]).get(float(q))

    def count_at_most(self, threshold: float) -> int:
        """Values ≤ ``threshold``, exact except for values sharing ``threshold``'s bucket.

        Those are counted as ≤ ``threshold``; so the answer is exact for every value outside
        ``[threshold/(1+2α), threshold·(1+2α)]``.
        """
        if threshold < 0:
            return 0
        if threshold >= self.max:
            return self.count
        if threshold < MIN_VALUE:
            return self.zero_count
        key = int(self.keys_for(np.array([threshold]))[0])
        return self.zero_count + int(self._counts[self._keys <= key].sum())

    def counts_at_most(self, thresholds: Sequence[float]) -> list[int]:
        """``count_at_most`` of each threshold, in one pass over the buckets (a heatmap asks
        two dozen per time bucket)."""
        t = np.asarray(thresholds, dtype=np.float64)
        if t.size == 0:
            return []
        cumulative = np.concatenate(([0], np.cumsum(self._counts)))
        keys = self.keys_for(np.maximum(t, MIN_VALUE))
        below = cumulative[np.searchsorted(self._keys, keys, side="right")]
        out = np.where(
            t < 0,
            0,
            np.where(
                t >= self.max, self.count, self.zero_count + np.where(t < MIN_VALUE, 0, below)
            ),
        )
        return [int(v) for v in out]

    # -- bytes -------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        deltas = self._keys.astype("<i8")  # a copy: deltas are computed in place
        deltas[1:] -= self._keys[:-1]
        body = deltas.tobytes() + self._counts.astype("<i8").tobytes()
        compress = len(body) > _COMPRESS_ABOVE
        header = _HEADER.pack(
            _MAGIC if compress else _MAGIC_RAW,
            self.alpha,
            self.count,
            self.zero_count,
            self.sum,
            self.min if self.count else 0.0,
            self.max if self.count else 0.0,
            self._keys.size,
        )
        return header + (zlib.compress(body, 1) if compress else body)

    @classmethod
    def from_bytes(cls, data: bytes) -> QuantileSketch:
        (alpha, count, zero, total, minimum, maximum), nkeys, body = _read(data)
        keys = np.cumsum(np.frombuffer(body, dtype="<i8", count=nkeys)).astype(np.int64)
        counts = np.frombuffer(body, dtype="<i8", count=nkeys, offset=8 * nkeys).astype(np.int64)
        sketch = cls.from_buckets(
            keys,
            counts,
            zero_count=zero,
            total=total,
            minimum=minimum,
            maximum=maximum,
            alpha=alpha,
        )
        if sketch.count != count:
            raise InvalidInput("sketch counts do not add up to its header")
        return sketch

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QuantileSketch):
            return NotImplemented
        return (
            self.alpha == other.alpha
            and self.count == other.count
            and self.zero_count == other.zero_count
            and math.isclose(self.sum, other.sum, rel_tol=1e-9, abs_tol=1e-12)
            and (self.count == 0 or (self.min == other.min and self.max == other.max))
            and np.array_equal(self._keys, other._keys)
            and np.array_equal(self._counts, other._counts)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"QuantileSketch(alpha={self.alpha}, count={self.count}, buckets={self._keys.size})"


def header_totals(data: bytes) -> tuple[int, float]:
    """``(count, sum)`` of a serialised sketch, read from its header without decoding buckets."""
    if len(data) < _HEADER.size:
        raise InvalidInput("sketch bytes are truncated")
    magic, _alpha, count, _zero, total, *_ = _HEADER.unpack_from(data)
    if magic not in (_MAGIC, _MAGIC_RAW):
        raise InvalidInput("not an infersight sketch (bad magic)")
    return int(count), float(total)


def merge_all(
    sketches: Iterable[QuantileSketch], alpha: float = DEFAULT_RELATIVE_ACCURACY
) -> QuantileSketch:
    """One sketch over everything the inputs hold (merging many at once, not pairwise)."""
    parts = [s for s in sketches if s.count]
    out = QuantileSketch(alpha)
    if not parts:
        return out
    keys = np.concatenate([s._keys for s in parts])
    counts = np.concatenate([s._counts for s in parts])
    if keys.size:
        unique, inverse = np.unique(keys, return_inverse=True)
        merged = np.rint(np.bincount(inverse, weights=counts, minlength=unique.size))
        out._keys, out._counts = unique, merged.astype(np.int64)
    for s in parts:
        if s.alpha != alpha:
            raise InvalidInput("cannot merge sketches of different accuracy")
        out.count += s.count
        out.zero_count += s.zero_count
        out.sum += s.sum
        out.min = min(out.min, s.min)
        out.max = max(out.max, s.max)
    return out


#: Bytes of a serialised sketch's header: what ``header_totals`` reads (a reader that needs
#: only counts and sums may fetch this prefix of each blob, not the whole blob).
HEADER_SIZE: Final = _HEADER.size


def _read(data: bytes) -> tuple[tuple[float, int, int, float, float, float], int, bytes]:
    """A blob's (alpha, count, zero, sum, min, max), bucket count and inflated body, checked
    (``from_bytes`` and ``merge_bytes`` read through it)."""
    if len(data) < _HEADER.size:
        raise InvalidInput("sketch bytes are truncated")
    magic, alpha, count, zero, total, minimum, maximum, nkeys = _HEADER.unpack_from(data)
    if magic not in (_MAGIC, _MAGIC_RAW):
        raise InvalidInput("not an infersight sketch (bad magic)")
    if nkeys > _MAX_KEYS:
        raise InvalidInput("sketch has too many buckets", details={"buckets": nkeys})
    body = data[_HEADER.size :]
    if magic == _MAGIC:
        try:
            body = zlib.decompress(body, bufsize=16 * nkeys or 64)
        except zlib.error as exc:
            raise InvalidInput(f"sketch body is corrupt: {exc}") from None
    if len(body) != 16 * nkeys:
        raise InvalidInput("sketch body length does not match its header")
    return (alpha, count, zero, total, minimum, maximum), nkeys, body


def merge_bytes(blobs: Sequence[bytes], alpha: float = DEFAULT_RELATIVE_ACCURACY) -> QuantileSketch:
    """``merge_all(QuantileSketch.from_bytes(b) for b in blobs)``, decoded in one pass: each
    blob's header is read and its body inflated, then every blob's buckets are rebuilt and
    merged at once (no sketch object per blob). The same checks refuse the same bad bytes
    (every blob's header and body first, then the counts), and the result equals
    ``merge_all``'s (totals summed in the blobs' order)."""
    bodies: list[bytes] = []
    sizes: list[int] = []
    heads: list[tuple[float, int, int, float, float, float]] = []
    for data in blobs:
        head, nkeys, body = _read(data)
        bodies.append(body)
        sizes.append(nkeys)
        heads.append(head)
    n = len(bodies)
    lengths = np.asarray(sizes, dtype=np.int64)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    both = np.frombuffer(b"".join(bodies), dtype="<i8").astype(np.int64)
    # Each body is its key deltas then its counts: split them apart, blob by blob.
    body_starts = 2 * starts
    pick_deltas = np.repeat(body_starts - starts, lengths) + np.arange(int(ends[-1]) if n else 0)
    deltas = both[pick_deltas]
    counts = both[pick_deltas + np.repeat(lengths, lengths)]
    # One running sum over all deltas, less the running sum where each blob starts.
    running = np.cumsum(deltas)
    before = np.concatenate(([0], running))[starts]
    keys = running - np.repeat(before, lengths)
    # The header's count must be the buckets' plus the zeros (as ``from_bytes`` checks).
    running_counts = np.concatenate(([0], np.cumsum(counts)))
    bucket_totals = running_counts[ends] - running_counts[starts]
    out = QuantileSketch(alpha)
    held = np.zeros(n, dtype=bool)
    for i, (alpha_b, count, zero, _total, _min, _max) in enumerate(heads):
        if int(bucket_totals[i]) + int(zero) != count:
            raise InvalidInput("sketch counts do not add up to its header")
        held[i] = count > 0
        if count and alpha_b != alpha:
            raise InvalidInput("cannot merge sketches of different accuracy")
    if not held.any():
        return out
    keep = np.repeat(held, lengths)
    keys, counts = keys[keep], counts[keep]
    if keys.size:
        unique, inverse = np.unique(keys, return_inverse=True)
        merged = np.rint(np.bincount(inverse, weights=counts, minlength=unique.size))
        out._keys, out._counts = unique, merged.astype(np.int64)
    for i, (_alpha, count, zero, total, minimum, maximum) in enumerate(heads):
        if not held[i]:
            continue
        out.count += int(count)
        out.zero_count += int(zero)
        out.sum += float(total)
        out.min = min(out.min, float(minimum))
        out.max = max(out.max, float(maximum))
    return out


def sketches_by_group(
    group_ids: IntArray, values: FloatArray, n_groups: int, alpha: float = DEFAULT_RELATIVE_ACCURACY
) -> list[QuantileSketch | None]:
    """Build one sketch per group in a single vectorised pass.

    ``values`` may hold NaN for "not reported"; those are skipped. Groups with no value get
    ``None``. Used by the store to turn a batch of records into per-minute rollup deltas, where
    most groups hold a handful of values: everything but the final slicing is done once for
    all groups.
    """
    present = ~np.isnan(values)
    gids, vals = group_ids[present], values[present]
    result: list[QuantileSketch | None] = [None] * n_groups
    if vals.size == 0:
        return result
    if np.any(vals < 0.0) or not np.all(np.isfinite(vals)):
        raise InvalidInput("sketch values must be finite and non-negative")
    template = QuantileSketch(alpha)
    positive = vals >= MIN_VALUE
    keys = np.full(vals.size, _ZERO_KEY, dtype=np.int64)
    keys[positive] = template.keys_for(vals[positive])
    run_gids, run_keys, run_counts = _bucket_runs(gids, keys, positive, n_groups)
    # Per-group totals straight from the group ids: no sort, and every group with a value
    # has at least one run, so the runs' groups index these arrays.
    sums = np.bincount(gids, weights=vals, minlength=n_groups)
    mins = np.full(n_groups, np.inf)
    maxs = np.full(n_groups, -np.inf)
    np.minimum.at(mins, gids, vals)
    np.maximum.at(maxs, gids, vals)
    run_group_starts = np.flatnonzero(np.r_[True, run_gids[1:] != run_gids[:-1]])
    run_group_ends = np.r_[run_group_starts[1:], run_gids.size]
    group_of_run = run_gids[run_group_starts]
    sums, mins, maxs = sums[group_of_run], mins[group_of_run], maxs[group_of_run]
    for i, (lo, hi) in enumerate(
        zip(run_group_starts.tolist(), run_group_ends.tolist(), strict=True)
    ):
        bucket_keys, bucket_counts = run_keys[lo:hi], run_counts[lo:hi]
        zero = 0
        if bucket_keys[0] == _ZERO_KEY:  # the zero bucket sorts first
            zero = int(bucket_counts[0])
            bucket_keys, bucket_counts = bucket_keys[1:], bucket_counts[1:]
        result[int(run_gids[lo])] = QuantileSketch.from_buckets(
            bucket_keys,
            bucket_counts,
            zero_count=zero,
            total=float(sums[i]),
            minimum=float(mins[i]),
            maximum=float(maxs[i]),
            alpha=alpha,
        )
    return result


#: Dense counting beats sorting while the (group, bucket) grid is at most this many cells
#: per value (plus a floor that small batches always fit under).
_DENSE_CELLS_PER_VALUE: Final = 8
_DENSE_CELLS_FLOOR: Final = 1 << 16


def _bucket_runs(
    gids: IntArray, keys: IntArray, positive: npt.NDArray[np.bool_], n_groups: int
) -> tuple[IntArray, IntArray, IntArray]:
    """``(group, key, count)`` of every occupied bucket, sorted by group then key (the zero
    bucket, ``_ZERO_KEY``, first in its group).

    Latency keys span a few hundred buckets, so a batch's (group, bucket) grid is usually
    small: one ``bincount`` over it counts every bucket in O(values), where sorting the
    (group, key) pairs costs O(values · log values) per sketched column. A grid too large
    for that (many groups, keys spread over decades) is sorted instead.
    """
    if positive.any():
        low = int(keys[positive].min())
        span = int(keys[positive].max()) - low + 2  # slot 0: the zero bucket
    else:
        low, span = 0, 1
    cells = n_groups * span
    if cells <= max(_DENSE_CELLS_FLOOR, _DENSE_CELLS_PER_VALUE * gids.size):
        slots = np.where(positive, keys - (low - 1), 0)
        counts = np.bincount(gids * span + slots, minlength=cells)
        occupied = np.flatnonzero(counts)
        run_slots = occupied % span
        run_keys = np.where(run_slots == 0, _ZERO_KEY, run_slots + (low - 1))
        return occupied // span, run_keys, counts[occupied]
    order = np.lexsort((keys, gids))
    gids_s, keys_s = gids[order], keys[order]
    change = np.r_[True, (gids_s[1:] != gids_s[:-1]) | (keys_s[1:] != keys_s[:-1])]
    run_starts = np.flatnonzero(change)
    run_counts = np.diff(np.r_[run_starts, gids_s.size])
    return gids_s[run_starts], keys_s[run_starts], run_counts
