"""Ctrl-C at a terminal stops ``infersight sidecar`` quietly (issue #33, defect 6).

A terminal sends SIGINT to its whole foreground process group, not only to the command it
started. The sidecar's decoder processes must not print a ``KeyboardInterrupt`` traceback each:
they are stopped by the sidecar, which closes their pipes as it stops."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.collector.harness import ROOT, post_spans, sidecar_args, vllm_spans
from tests.waiting import until


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found.update(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_ctrl_c_to_the_process_group_stops_the_sidecar_without_a_traceback(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'store.db'}"
    args = ["--store", store, "sidecar", *sidecar_args(tmp_path / "spool", "ctrl-c")]
    proc = subprocess.Popen(
        [sys.executable, "-c", "from infersight.cli import main; main()", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        process_group=0,  # its own foreground group, as a shell with job control starts it
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"http=(127\.0\.0\.1:\d+)", line)
        assert match, line
        # An export answered: a decoder is up and waiting for the next, as in normal running.
        assert post_spans(f"http://{match.group(1)}", vllm_spans(5)).status_code == 200
        decoders = until(lambda: _children(proc.pid), "the decoder processes", process=proc)
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "stopped" in out
    assert "Traceback" not in err, err
    assert "KeyboardInterrupt" not in err, err
    assert not [pid for pid in decoders if _alive(pid)]
