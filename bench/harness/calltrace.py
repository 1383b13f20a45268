"""A pytest plugin that records every call from a ``service`` frame into a ``storage`` frame.

``bench/house.py`` runs one end-to-end test under it (an SLO burn from the evaluation through
diagnosis and the outbox to a Slack delivery) to count how often the walk of one burn leaves
the use-case layer for the store and comes back: every recorded call is one such return.

A *transition* is a Python-level call event (``sys.setprofile``) whose callee's module is
``infersight.storage`` or below and whose direct caller's module is ``infersight.service`` or
below; a generator or coroutine resumed from the service counts again (it also comes back). A
*call site* is a distinct (service function, storage function) pair, each named
``module:qualname``. Only the test's call phase is traced, in every thread, so the fixtures'
seeding of the store does not count; each transition is also filed under its *entry*: the
outermost ``infersight`` frame on the stack below the test, e.g. the app's factory, the
evaluator's run or the delivery job's tick.

The plugin imports nothing of the project, so that it can trace another checkout's tree:
``bench/house.py`` loads this file by its path and hands it to ``pytest.main(plugins=...)`` in
a Python started in that tree's root with the tree first on ``PYTHONPATH`` (putting
``bench/harness`` on the path would shadow the standard library's ``concurrent``). It writes
its findings as JSON to the file named by ``INFERSIGHT_CALLTRACE_OUT``::

    {"tests": [nodeid, ...], "outcomes": {nodeid: "passed"},
     "infersight_file": ".../infersight/__init__.py",
     "calls": [{"caller": "...", "callee": "...", "entry": "...", "count": N}, ...]}
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections import Counter
from collections.abc import Generator
from types import FrameType
from typing import Any

import pytest

SERVICE = "infersight.service"
STORAGE = "infersight.storage"
OUT = "INFERSIGHT_CALLTRACE_OUT"


def _module(frame: FrameType) -> str:
    name = frame.f_globals.get("__name__")
    return name if isinstance(name, str) else ""


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _name(frame: FrameType) -> str:
    return f"{_module(frame)}:{frame.f_code.co_qualname}"


class Recorder:
    """Counts (caller, callee, entry) triples while installed."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str, str]] = Counter()
        self._lock = threading.Lock()

    def _entry(self, frame: FrameType) -> str:
        """The outermost ``infersight`` frame of the stack ``frame`` is on."""
        outermost = frame
        walk: FrameType | None = frame
        while walk is not None:
            if _within(_module(walk), "infersight"):
                outermost = walk
            walk = walk.f_back
        return _name(outermost)

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not _within(_module(frame), STORAGE):
            return
        caller = frame.f_back
        if caller is None or not _within(_module(caller), SERVICE):
            return
        key = (_name(caller), _name(frame), self._entry(caller))
        with self._lock:
            self.counts[key] += 1

    def install(self) -> None:
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)

    def remove(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)


_recorder = Recorder()
_outcomes: dict[str, str] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    _recorder.install()
    try:
        yield
    finally:
        _recorder.remove()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome != "passed":
        _outcomes[report.nodeid] = report.outcome


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get(OUT)
    if not path:
        return
    infersight = sys.modules.get("infersight")
    found = {
        "tests": sorted(_outcomes),
        "outcomes": _outcomes,
        "infersight_file": getattr(infersight, "__file__", None),
        "calls": [
            {"caller": caller, "callee": callee, "entry": entry, "count": count}
            for (caller, callee, entry), count in sorted(_recorder.counts.items())
        ],
    }
    with open(path, "w", encoding="utf-8") as out:
        json.dump(found, out, indent=1)
