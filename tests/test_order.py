"""The workers take the longest test files first (``tests.order``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.order import LONGEST_FIRST, longest_first

ROOT = Path(__file__).resolve().parents[1]


def _items(*nodeids: str) -> list[Any]:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_listed_files_first_then_the_most_tests_and_a_file_keeps_its_own_order() -> None:
    first, second = LONGEST_FIRST[0], LONGEST_FIRST[1]
    items = _items(
        "tests/a/test_few.py::test_1",
        f"{second}::test_b[2]",
        "tests/a/test_many.py::test_z",
        f"{first}::test_y",
        "tests/a/test_many.py::test_a",
        f"{second}::test_b[1]",
        "tests/a/test_many.py::test_m",
        f"{first}::test_x",
    )
    longest_first(items)
    assert [i.nodeid for i in items] == [
        f"{first}::test_y",
        f"{first}::test_x",
        f"{second}::test_b[2]",
        f"{second}::test_b[1]",
        "tests/a/test_many.py::test_z",
        "tests/a/test_many.py::test_a",
        "tests/a/test_many.py::test_m",
        "tests/a/test_few.py::test_1",
    ]


def test_every_listed_file_exists_once() -> None:
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    for path in LONGEST_FIRST:
        assert (ROOT / path).is_file(), path
