"""Same-run references, interleaved, and the spread of their ratios.

On a shared host the load moves two- to three-fold within minutes, so a figure measured
minutes after its reference says as much about the load as about the code. A benchmark that
prints a ratio against a reference therefore measures both in rounds: in each round every case
runs once, in ABBA order (round 1 reference first, round 2 measured first, …) or a shuffled
order, and each round's ratio is taken within the round. It prints every round's figures, the
median of the ratios and their spread (min–max), not the median alone.

    runs = interleave({"reference": ref, "writer": writer}, rounds=4)
    spread = ratio_spread(runs["writer"], runs["reference"])
    print(f"writer {spread.text('×')}")   # 0.46× (0.22–0.65, 4 rounds)
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

#: How the cases' order changes from round to round.
ORDERS = ("abba", "random")


def round_orders(
    names: Sequence[str], rounds: int, order: str = "abba", seed: int = 0
) -> list[list[str]]:
    """The order the cases run in, per round: ``abba`` alternates the given order and its
    reverse (A B, B A, A B, …: each case runs first as often as last); ``random`` shuffles each
    round (seeded, so a run can be repeated)."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    rng = random.Random(seed)
    out = []
    for r in range(rounds):
        names_r = list(names)
        if order == "abba":
            if r % 2:
                names_r.reverse()
        else:
            rng.shuffle(names_r)
        out.append(names_r)
    return out


def interleave(
    cases: Mapping[str, Callable[[], T]],
    rounds: int,
    *,
    order: str = "abba",
    seed: int = 0,
    on_round: Callable[[int, list[str], dict[str, T]], None] | None = None,
) -> dict[str, list[T]]:
    """Run every case once per round in :func:`round_orders`' order; each case's results, one
    per round, in round order. ``on_round(r, order, results)`` is called after each round (to
    print it as it comes)."""
    out: dict[str, list[T]] = {name: [] for name in cases}
    for r, names in enumerate(round_orders(list(cases), rounds, order, seed)):
        this: dict[str, T] = {}
        for name in names:
            this[name] = cases[name]()
            out[name].append(this[name])
        if on_round is not None:
            on_round(r, names, {name: this[name] for name in cases})
    return out


@dataclass(frozen=True)
class Spread:
    """Per-round values (ratios, or figures) with their median and range."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def text(self, unit: str = "×", fmt: str = ".2f") -> str:
        """``0.46× (0.22–0.65, 6 rounds)``; a single round has no range to show."""
        med = f"{self.median:{fmt}}{unit}"
        if len(self.values) == 1:
            return f"{med} (1 round)"
        return f"{med} ({self.low:{fmt}}–{self.high:{fmt}}, {len(self.values)} rounds)"

    def as_dict(self) -> dict[str, Any]:
        return {
            "median": self.median,
            "min": self.low,
            "max": self.high,
            "rounds": list(self.values),
        }


def spread(values: Sequence[float]) -> Spread:
    if not values:
        raise ValueError("no values")
    return Spread(tuple(float(v) for v in values))


def ratio_spread(measured: Sequence[float], reference: Sequence[float]) -> Spread:
    """Each round's ``measured / reference`` (both from the same round)."""
    if len(measured) != len(reference):
        raise ValueError(f"{len(measured)} measured rounds against {len(reference)} references")
    return spread([m / r if r else float("inf") for m, r in zip(measured, reference, strict=True)])


def add_round_arguments(parser: Any, rounds: int, order: str = "abba") -> None:
    """``--rounds N`` and ``--order abba|random`` on an ``argparse`` parser."""
    parser.add_argument(
        "--rounds",
        type=int,
        default=rounds,
        help=f"rounds, each running the reference and the measured cases once (default {rounds})",
    )
    parser.add_argument(
        "--order",
        choices=ORDERS,
        default=order,
        help="order of the cases within a round: abba alternates, random shuffles "
        f"(default {order})",
    )
