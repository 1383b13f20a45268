"""Exact quantiles: the reference every sketch answer is held to.

The definition is numpy's default (``method="linear"``) and PostgreSQL's ``percentile_cont``:
for ``n`` sorted values and quantile ``q`` the rank is ``h = q·(n−1)`` and the answer
interpolates linearly between the values at ``⌊h⌋`` and ``⌈h⌉``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from infersight.core.errors import InvalidInput

DEFAULT_QUANTILES: Final = (0.5, 0.9, 0.95, 0.99)


def check_quantiles(quantiles: Iterable[float]) -> tuple[float, ...]:
    """Validated, de-duplicated, sorted quantiles in [0, 1]."""
    out: set[float] = set()
    for q in quantiles:
        if not isinstance(q, int | float) or not math.isfinite(q) or not 0.0 <= q <= 1.0:
            raise InvalidInput("quantiles must be numbers in [0, 1]", details={"quantile": q})
        out.add(float(q))
    if not out:
        raise InvalidInput("at least one quantile is required")
    if len(out) > 32:
        raise InvalidInput("at most 32 quantiles per query")
    return tuple(sorted(out))


def parse_quantiles(text: str) -> tuple[float, ...]:
    """``"0.5,0.9,0.99"`` → ``(0.5, 0.9, 0.99)``, with a clear error for anything else."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise InvalidInput(f"quantiles must be comma-separated numbers, got {text!r}") from None
    return check_quantiles(values)


def exact_quantiles(
    values: Sequence[float] | npt.NDArray[np.float64], quantiles: Sequence[float]
) -> dict[float, float]:
    """Exact linear-interpolation quantiles of ``values``; empty input gives an empty dict."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        return {}
    qs = check_quantiles(quantiles)
    result = np.quantile(array, qs, method="linear")
    return {q: float(v) for q, v in zip(qs, result, strict=True)}


def quantile_key(q: float) -> str:
    """How a quantile is spelled as a JSON key: ``0.5`` → ``"0.5"``, ``0.99`` → ``"0.99"``."""
    return format(q, "g")
