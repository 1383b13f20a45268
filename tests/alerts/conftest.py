"""The accuracy tables: tests record their outcomes, the terminal summary prints them."""

from __future__ import annotations

from typing import Any

import pytest

from bench.harness import real_path, scenarios

_LOG = pytest.StashKey[dict[tuple[str, str], Any]]()
_PATH_LOG = pytest.StashKey[dict[str, Any]]()


@pytest.fixture(scope="session")
def accuracy_log(pytestconfig: pytest.Config) -> dict[tuple[str, str], Any]:
    """(store dialect, scenario) → ``bench.harness.scenarios.Outcome``; printed after the run."""
    return pytestconfig.stash.setdefault(_LOG, {})


@pytest.fixture(scope="session")
def real_path_log(pytestconfig: pytest.Config) -> dict[str, Any]:
    """scenario → ``bench.harness.real_path.PathOutcome``; printed after the run."""
    return pytestconfig.stash.setdefault(_PATH_LOG, {})


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    log = config.stash.get(_LOG, {})
    if log:
        for dialect in sorted({d for d, _ in log}):
            rows = [o for (d, _), o in sorted(log.items()) if d == dialect]
            terminalreporter.write_sep("-", f"diagnosis accuracy ({dialect})")
            for line in scenarios.table(rows).splitlines():
                terminalreporter.write_line(line)
    paths = config.stash.get(_PATH_LOG, {})
    if paths:
        terminalreporter.write_sep("-", "diagnosis through the real path")
        for line in real_path.table([paths[n] for n in sorted(paths)]).splitlines():
            terminalreporter.write_line(line)
