"""``merge_bytes`` decodes and merges serialised sketches in one pass, with exactly the answer
of ``merge_all`` over ``from_bytes`` of each (issue 35, item 4: the latency pages' decoding)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from infersight.core.errors import InvalidInput
from infersight.core.sketch import (
    HEADER_SIZE,
    QuantileSketch,
    header_totals,
    merge_all,
    merge_bytes,
)


def _same(a: QuantileSketch, b: QuantileSketch) -> None:
    assert (a.alpha, a.count, a.zero_count, a.sum, a.min, a.max) == (
        b.alpha,
        b.count,
        b.zero_count,
        b.sum,
        b.min,
        b.max,
    )
    assert np.array_equal(a._keys, b._keys)
    assert np.array_equal(a._counts, b._counts)
    assert a._keys.dtype == b._keys.dtype
    assert a._counts.dtype == b._counts.dtype
    assert a.quantiles([0.5, 0.9, 0.99]) == b.quantiles([0.5, 0.9, 0.99])


def _blobs(rng: np.random.Generator, n: int) -> list[bytes]:
    out = []
    for i in range(n):
        kind = i % 6
        if kind == 0:
            sketch = QuantileSketch()  # empty: count 0
        elif kind == 1:
            sketch = QuantileSketch.of([0.0] * int(rng.integers(1, 5)))  # zeros only
        elif kind == 2:
            sketch = QuantileSketch.of(rng.lognormal(-7, 1, 3))  # small, raw, negative keys
        else:  # large enough to be compressed, wide spread
            size = int(rng.integers(20, 2000))
            values = rng.lognormal(np.log(0.1), 2.0, size)
            values[: size // 10] = 0.0
            sketch = QuantileSketch.of(values)
        out.append(sketch.to_bytes())
    return out


@pytest.mark.parametrize("n", [0, 1, 2, 7, 60, 400])
def test_merge_bytes_is_merge_all_of_from_bytes(n: int) -> None:
    rng = np.random.default_rng(n)
    blobs = _blobs(rng, n)
    rng.shuffle(blobs)  # type: ignore[arg-type]
    _same(merge_bytes(blobs), merge_all(QuantileSketch.from_bytes(b) for b in blobs))


def test_only_empty_sketches_merge_to_an_empty_one() -> None:
    empty = QuantileSketch().to_bytes()
    _same(merge_bytes([empty, empty]), merge_all([QuantileSketch(), QuantileSketch()]))


def test_bad_bytes_are_refused_as_from_bytes_refuses_them() -> None:
    good = QuantileSketch.of(np.linspace(0.01, 5, 500)).to_bytes()
    small = QuantileSketch.of([0.2, 0.3]).to_bytes()
    header = struct.Struct("<4sdQQdddI")
    magic, alpha, count, zero, total, low, high, nkeys = header.unpack_from(small)
    wrong_count = header.pack(magic, alpha, count + 1, zero, total, low, high, nkeys)
    other_alpha = QuantileSketch.of([1.0, 2.0], alpha=0.02).to_bytes()
    for bad in (
        good[:10],
        b"XXXX" + good[4:],
        good[:-5],
        wrong_count + small[header.size :],
        other_alpha,
    ):
        with pytest.raises(InvalidInput):
            merge_all([QuantileSketch.from_bytes(small), QuantileSketch.from_bytes(bad)])
        with pytest.raises(InvalidInput):
            merge_bytes([small, bad])


def test_the_header_prefix_is_all_header_totals_reads() -> None:
    data = QuantileSketch.of(np.linspace(0.01, 5, 500)).to_bytes()
    assert header_totals(data[:HEADER_SIZE]) == header_totals(data)
