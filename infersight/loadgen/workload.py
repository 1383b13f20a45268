"""What each request asks for: its input and output lengths, and a prompt of that length.

Lengths come from a distribution (``fixed:512``, ``uniform:100:1000``, ``normal:512:128``,
``lognormal:512:0.5`` — median and sigma), a long-tail mix (a fraction of requests with a very
long output among many short ones), or a replay of the (input, output) shapes of production
requests read from the store, in their recorded order.

Prompts are random words of four characters each (`` the``, `` and``…): one token apiece in
the BPE tokenizers of common models and exactly one for the simulator's four-characters-a-token
estimate; random, so no two prompts share a prefix that a prefix cache could serve.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Protocol

import numpy as np

from infersight.core.errors import InvalidInput

MAX_TOKENS: Final = 1_000_000
_WORDS: Final = (
    " the", " and", " for", " you", " are", " was", " not", " but", " all", " can", " had",
    " her", " one", " our", " out", " day", " get", " has", " him", " his", " how", " man",
    " new", " now", " old", " see", " two", " way", " who", " its", " did", " yes",
)  # fmt: skip


class DistKind(StrEnum):
    FIXED = "fixed"
    UNIFORM = "uniform"
    NORMAL = "normal"
    LOGNORMAL = "lognormal"


@dataclass(frozen=True, slots=True)
class Lengths:
    """A token-length distribution, clipped to [1, ``cap``]."""

    kind: DistKind
    a: float
    b: float = 0.0
    cap: int = MAX_TOKENS

    def __post_init__(self) -> None:
        if not (math.isfinite(self.a) and math.isfinite(self.b)) or self.a < 1 or self.b < 0:
            raise InvalidInput("length parameters must be finite, the first ≥ 1")
        if self.kind is DistKind.UNIFORM and self.b < self.a:
            raise InvalidInput("uniform:LOW:HIGH needs LOW ≤ HIGH")
        if not 1 <= self.cap <= MAX_TOKENS:
            raise InvalidInput(f"lengths are capped within [1, {MAX_TOKENS}]")

    @property
    def mean(self) -> float:
        match self.kind:
            case DistKind.UNIFORM:
                return (self.a + self.b) / 2
            case DistKind.LOGNORMAL:
                return self.a * math.exp(self.b**2 / 2)
            case _:
                return self.a

    def draw(self, rng: np.random.Generator) -> int:
        match self.kind:
            case DistKind.FIXED:
                value = self.a
            case DistKind.UNIFORM:
                value = rng.uniform(self.a, self.b)
            case DistKind.NORMAL:
                value = rng.normal(self.a, self.b)
            case DistKind.LOGNORMAL:
                value = self.a * math.exp(rng.normal(0.0, self.b))
        return int(min(self.cap, max(1, round(value))))


def parse_lengths(text: str) -> Lengths:
    """``fixed:N``, ``uniform:LOW:HIGH``, ``normal:MEAN:SD`` or ``lognormal:MEDIAN:SIGMA``."""
    kind, *params = text.strip().lower().split(":")
    if kind.isdigit() and not params:  # a bare number means fixed
        kind, params = "fixed", [kind]
    try:
        dist = DistKind(kind)
        values = [float(p) for p in params]
    except ValueError:
        raise InvalidInput(
            f"not a length distribution: {text[:64]!r}",
            details={"forms": "fixed:N, uniform:LOW:HIGH, normal:MEAN:SD, lognormal:MEDIAN:SIGMA"},
        ) from None
    expected = 1 if dist is DistKind.FIXED else 2
    if len(values) != expected:
        raise InvalidInput(f"{dist.value} takes {expected} number(s)", details={"given": text})
    return Lengths(dist, values[0], values[1] if len(values) > 1 else 0.0)


@dataclass(frozen=True, slots=True)
class Shape:
    input_tokens: int
    output_tokens: int


class Workload(Protocol):
    """Chooses the next request's shape; ``mean_output`` sizes capacity figures."""

    def next(self) -> Shape: ...

    @property
    def mean_output(self) -> float: ...


class Sampled:
    """Independent draws of input and output lengths."""

    def __init__(self, inputs: Lengths, outputs: Lengths, rng: np.random.Generator) -> None:
        self._inputs, self._outputs, self._rng = inputs, outputs, rng

    def next(self) -> Shape:
        return Shape(self._inputs.draw(self._rng), self._outputs.draw(self._rng))

    @property
    def mean_output(self) -> float:
        return self._outputs.mean


class LongTail:
    """Many short requests with, now and then, a very long output."""

    def __init__(
        self, base: Workload, long_output: int, fraction: float, rng: np.random.Generator
    ) -> None:
        if not 0 < fraction < 1:
            raise InvalidInput("the long-request fraction is in (0, 1)")
        if not 1 <= long_output <= MAX_TOKENS:
            raise InvalidInput(f"a long output has between 1 and {MAX_TOKENS} tokens")
        self._base, self._long, self._fraction, self._rng = base, long_output, fraction, rng

    def next(self) -> Shape:
        shape = self._base.next()
        if self._rng.random() < self._fraction:
            return Shape(shape.input_tokens, self._long)
        return shape

    @property
    def mean_output(self) -> float:
        return (1 - self._fraction) * self._base.mean_output + self._fraction * self._long

    @property
    def base(self) -> Workload:
        return self._base


class Replay:
    """Production shapes in their recorded order, from the start again when they run out."""

    def __init__(self, shapes: Sequence[tuple[int, int]]) -> None:
        if not shapes:
            raise InvalidInput("no production requests to replay in that window and selector")
        self._shapes = [Shape(max(1, i), max(1, o)) for i, o in shapes]
        self._next = 0

    def next(self) -> Shape:
        shape = self._shapes[self._next % len(self._shapes)]
        self._next += 1
        return shape

    @property
    def shapes(self) -> tuple[Shape, ...]:
        return tuple(self._shapes)

    @property
    def mean_output(self) -> float:
        return sum(s.output_tokens for s in self._shapes) / len(self._shapes)


def prompt(tokens: int, rng: np.random.Generator) -> str:
    """``tokens`` random four-character words."""
    picks = rng.integers(0, len(_WORDS), size=tokens)
    return "".join(_WORDS[i] for i in picks)
