"""The accuracy table: tests record their outcomes, the terminal summary prints them."""

from __future__ import annotations

from typing import Any

import pytest

_LOG = pytest.StashKey[dict[tuple[str, str], Any]]()


@pytest.fixture(scope="session")
def accuracy_log(pytestconfig: pytest.Config) -> dict[tuple[str, str], Any]:
    """(store dialect, scenario) → ``bench_alerts.Outcome``; printed after the run."""
    return pytestconfig.stash.setdefault(_LOG, {})


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    log = config.stash.get(_LOG, {})
    if not log:
        return
    import bench_alerts  # loaded by test_accuracy

    for dialect in sorted({d for d, _ in log}):
        rows = [o for (d, _), o in sorted(log.items()) if d == dialect]
        terminalreporter.write_sep("-", f"diagnosis accuracy ({dialect})")
        for line in bench_alerts.table(rows).splitlines():
            terminalreporter.write_line(line)
