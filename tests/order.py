"""The order test files are handed to the workers: the longest first.

``.ci/run`` runs the suite on three workers with ``--dist loadfile`` (a file runs on one
worker, for its module-scoped fixtures) and ``--no-loadscope-reorder``, so the workers take
files in collection order. xdist's own order (most tests first) put the long files — a
container build, a live demo, the real alerting path, each with a few tests — at the end,
where one worker ran them while the other two sat idle. Started first, they overlap the many
short files instead (longest-processing-time-first scheduling).

``LONGEST_FIRST`` lists the files over ~30 s of test time, longest first (``pytest
--durations`` on the 2-core host, 2026-12-07). A file not listed keeps xdist's rule: more tests
first. The order of the tests inside a file never changes. A stale list costs time, not
correctness.
"""

from __future__ import annotations

from collections import Counter
from typing import Final

import pytest

LONGEST_FIRST: Final = (
    "tests/alerts/test_real_path.py",
    "tests/deploy/test_image.py",
    "tests/alerts/test_accuracy.py",
    "tests/deploy/test_compose.py",
    "tests/test_demo.py",
    "tests/api/test_schemathesis.py",
    "tests/loadgen/test_locust.py",
    "tests/alerts/test_crash_consistency.py",
    "tests/collector/test_spool_disk_full.py",
    "tests/collector/test_collector_grpc_limits.py",
    "tests/collector/test_collector_bench_smoke.py",
    "tests/collector/test_connection_caps.py",
    "tests/test_demo_fresh.py",
    "tests/test_bench_smoke.py",
    "tests/storage/test_rollup_deltas.py",
    "tests/service/test_goodput_slo.py",
    "tests/storage/test_store_capacity.py",
    "tests/api/test_bench_readers_smoke.py",
    "tests/collector/test_central_ingest.py",
    "tests/loadgen/test_bench_clients_smoke.py",
    "tests/clickhouse/test_requests_parity.py",
)


def longest_first(items: list[pytest.Item]) -> None:
    """Sort ``items`` in place: the listed files first, in their order; then by how many tests
    a file has, most first; a file's own tests keep their collection order (a stable sort)."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    counts = Counter(_file(item) for item in items)

    def key(item: pytest.Item) -> tuple[int, int, str]:
        name = _file(item)
        return (rank.get(name, len(rank)), -counts[name], name)

    items.sort(key=key)


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]
