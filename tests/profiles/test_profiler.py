"""``collector.profiling.Profiler`` against real processes: a profile, and each reason for none
(py-spy without the right to attach, py-spy missing, no such process, not a Python process)
— stored as the reason, never raised."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from infersight.collector.profiling import Profiler, ProfilerConfig, ProfileTarget
from tests.profiles.support import stop
from tests.waiting import until

LOOP = "import time\nwhile True:\n    sum(range(2000)); time.sleep(0.001)\n"


@pytest.fixture
def target() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", LOOP, "profile-me-please"])
    yield process
    stop(process)


def test_a_profile_of_a_running_process_by_pid_file_and_by_name(
    target: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    pid_file = tmp_path / "server.pid"
    pid_file.write_text(f"{target.pid}\n")
    for spec in (str(pid_file), "profile-me-please"):
        outcome = Profiler(ProfilerConfig(ProfileTarget(spec), native=False)).run(1, 20)
        assert outcome.error == "", outcome.error
        assert outcome.pid == target.pid
        assert outcome.summary is not None
        assert outcome.summary["samples"] > 0
        assert outcome.summary["measured"] == ["tokenizer", "logging"]
        assert outcome.cpu_s > 0  # the py-spy child's own CPU, for the cost figure


def test_by_name_the_python_process_is_taken_over_its_shell_wrapper(tmp_path: Path) -> None:
    """``sh -c 'python … NAME; …'``: the shell (the lower pid) holds the name too; the
    interpreter is the one sampled."""
    ready = tmp_path / "ready"
    code = f"import pathlib, time; pathlib.Path({str(ready)!r}).touch(); time.sleep(600)"
    script = f"{shlex.quote(sys.executable)} -c {shlex.quote(code)} wrapped-target-xyz; true"
    shell = subprocess.Popen(["/bin/sh", "-c", script])
    try:
        until(ready.exists, "the wrapped interpreter running")
        (child,) = [
            int(p.name)
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and _parent(p) == shell.pid
        ]
        assert child > shell.pid
        assert ProfileTarget("wrapped-target-xyz").resolve() == child
    finally:
        for pid in (p for p in Path("/proc").iterdir() if p.name.isdigit()):
            if _parent(pid) == shell.pid:
                os.kill(int(pid.name), signal.SIGTERM)
        stop(shell)


def _parent(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def test_caps_hold_whatever_is_asked(target: subprocess.Popen[bytes]) -> None:
    config = ProfilerConfig(ProfileTarget(str(target.pid)), max_seconds=1, max_rate=10)
    outcome = Profiler(config).run(30, 200)
    assert outcome.summary is not None
    assert (outcome.summary["seconds"], outcome.summary["rate"]) == (1, 10)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
def test_without_the_right_to_attach_the_reason_is_not_permitted(
    target: subprocess.Popen[bytes],
) -> None:
    # py-spy run as nobody, as a sidecar without SYS_PTRACE is, against another user's process.
    nobody = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
    outcome = Profiler(ProfilerConfig(ProfileTarget(str(target.pid)), prefix=nobody)).run(1, 20)
    assert outcome.summary is None
    assert outcome.error.startswith("not permitted: py-spy cannot attach"), outcome.error
    assert "SYS_PTRACE" in outcome.error
    assert "sudo" not in outcome.error


def test_each_other_reason(target: subprocess.Popen[bytes], tmp_path: Path) -> None:
    missing = ProfilerConfig(ProfileTarget(str(target.pid)), py_spy=str(tmp_path / "py-spy"))
    assert Profiler(missing).run(1, 20).error.startswith("py-spy missing")
    nothing = Profiler(ProfilerConfig(ProfileTarget("no-process-has-this-name-xyz"))).run(1, 20)
    assert nothing.error.startswith("process not found: no process whose command line")
    unread = Profiler(ProfilerConfig(ProfileTarget(str(tmp_path / "absent.pid")))).run(1, 20)
    assert unread.error.startswith("process not found: cannot read pid file")
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        native = Profiler(ProfilerConfig(ProfileTarget(str(sleeper.pid)))).run(1, 20)
    finally:
        stop(sleeper)
    assert native.error.startswith("process not found: process"), native.error
    assert "not Python" in native.error
