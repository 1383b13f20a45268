"""``bench/bench_pages.py`` times every page of the dashboard's navigation (issue 35, item 4):
a page added to the navigation is timed too, or this fails."""

from __future__ import annotations

import ast
from pathlib import Path

from infersight.api.dashboard.routes import VIEWS

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_pages.py"


def test_the_pages_benchmark_times_every_page_of_the_navigation() -> None:
    tree = ast.parse(BENCH.read_text(encoding="utf-8"))
    pages = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "PAGES" for t in node.targets)
    )
    assert pages == tuple(view.NAME for view in VIEWS)
