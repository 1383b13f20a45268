"""CPU and memory of a process and every process it started (Linux ``/proc``).

The sidecar decodes large exports in child processes (``collector.decoding``), so what it costs
is its whole tree's: counting its main process alone misses most of the work.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat``'s fields after the command name (field 3 on), or None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def tree(pid: int) -> list[int]:
    """``pid`` and every process descending from it (from each process's parent in /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def named(name: str) -> list[int]:
    """The running processes whose command name is ``name`` (``/proc/PID/stat``'s)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            head = (entry / "stat").read_text().split(") ", 1)[0]
        except OSError:
            continue
        if head.partition("(")[2] == name:
            out.append(int(entry.name))
    return out


def cpu_seconds(pids: list[int]) -> float:
    """User + system seconds of ``pids``, the children each already reaped included (cutime,
    cstime), so a child that exited between two readings still counts."""
    total = 0
    for p in pids:
        if (fields := _stat(p)) is not None:
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / CLOCK_TICK


def tree_cpu_seconds(pid: int) -> float:
    """User + system seconds of the tree (``cpu_seconds``)."""
    return cpu_seconds(tree(pid))


def tree_memory_mb(pid: int) -> tuple[float, float, int]:
    """(sum of RSS, sum of PSS, processes) over the tree, in MB (MiB). PSS splits shared pages
    between the processes mapping them: its sum is what the tree adds to the machine."""
    rss = pss = 0
    count = 0
    for p in tree(pid):
        try:
            status = Path(f"/proc/{p}/status").read_text()
            rollup = Path(f"/proc/{p}/smaps_rollup").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if m := re.search(r"VmRSS:\s+(\d+) kB", status):
            rss += int(m.group(1))
            count += 1
        if m := re.search(r"^Pss:\s+(\d+) kB", rollup, re.MULTILINE):
            pss += int(m.group(1))
    return rss / 1024, pss / 1024, count


def rss_mb(pid: int) -> float:
    """RSS of the one process ``pid`` (not its children), in MB (MiB)."""
    match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(match.group(1)) / 1024 if match else float("nan")
