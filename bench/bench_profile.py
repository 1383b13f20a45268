"""What a profile costs (issue 37): the sidecar's py-spy child's CPU against the serving
process's own CPU in the same window, and what it does to the serving process's throughput.

One real-time simulator process (``infersight simulate --realtime --host-limit tokenizer``,
so that the serving thread is busy on the CPU as a host-bound server is) serves three
streaming clients all along. Rounds interleave, in ABBA order per round, windows of
``--seconds`` each:

* ``native``: the sidecar's profiler (``collector.profiling.Profiler``, as the sidecar runs
  it: ``--idle --threads --native``, py-spy pausing the process per sample) at ``--rate``;
* ``nonblocking``: the same without native frames (``--nonblocking``: no pauses);
* ``none``: no profile (the reference).

Per window: the py-spy child's CPU seconds (``wait4`` of that child), the serving process's
CPU seconds (``/proc/PID/stat``, utime + stime) and the requests it completed. Printed: the
median over rounds of py-spy CPU / serving CPU per mode, and of the requests completed
against the reference windows of the same round (the load on this machine varies two to
three times, hence the interleaving and the same-round ratios).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infersight.collector.profiling import Profiler, ProfilerConfig, ProfileTarget
from tests.profiles.support import busy, simulator

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def window(pid: int, served: list[int], mode: str, seconds: float, rate: int) -> dict[str, Any]:
    cpu0, done0, t0 = cpu_s(pid), served[0], time.monotonic()
    spy = 0.0
    if mode == "none":
        time.sleep(seconds)
    else:
        config = ProfilerConfig(ProfileTarget(str(pid)), native=mode == "native", max_rate=200)
        outcome = Profiler(config).run(seconds, rate)
        if outcome.summary is None:
            raise SystemExit(f"no profile: {outcome.error}")
        spy = outcome.cpu_s
    wall = time.monotonic() - t0
    return {
        "mode": mode,
        "wall_s": wall,
        "serving_cpu_s": cpu_s(pid) - cpu0,
        "py_spy_cpu_s": spy,
        "requests": served[0] - done0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rate", type=int, default=50)
    parser.add_argument("--clients", type=int, default=8, help="Streaming clients all along.")
    parser.add_argument("--json", type=Path, default=None, help="Write the figures here.")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        simulator("tokenizer", Path(tmp)) as (process, url),
        busy(url, clients=args.clients) as served,
    ):
        for n in range(args.rounds):
            order = ["none", "native", "nonblocking"]
            if n % 2:
                order.reverse()
            for mode in order:
                row = window(process.pid, served, mode, args.seconds, args.rate)
                row["round"] = n
                rows.append(row)
                print(
                    f"round {n} {mode:<11} serving {row['serving_cpu_s']:.2f} CPU s, "
                    f"py-spy {row['py_spy_cpu_s']:.2f} CPU s, {row['requests']} requests "
                    f"in {row['wall_s']:.1f} s",
                    flush=True,
                )
    figures: dict[str, Any] = {"rate": args.rate, "seconds": args.seconds, "rows": rows}
    print(
        f"\nprofile cost at {args.rate} Hz for {args.seconds:g} s, median of {args.rounds} rounds:"
    )
    for mode in ("native", "nonblocking"):
        cost = [
            r["py_spy_cpu_s"] / r["serving_cpu_s"]
            for r in rows
            if r["mode"] == mode and r["serving_cpu_s"] > 0
        ]
        speed = []
        for n in range(args.rounds):
            mine = [r for r in rows if r["round"] == n and r["mode"] == mode]
            ref = [r for r in rows if r["round"] == n and r["mode"] == "none"]
            if mine and ref and ref[0]["requests"]:
                speed.append(
                    (mine[0]["requests"] / mine[0]["wall_s"])
                    / (ref[0]["requests"] / ref[0]["wall_s"])
                )
        spent = [r["py_spy_cpu_s"] / args.seconds for r in rows if r["mode"] == mode]
        figures[mode] = {
            "py_spy_over_serving_cpu": statistics.median(cost) if cost else None,
            "py_spy_cores": statistics.median(spent),
            "throughput_vs_reference": statistics.median(speed) if speed else None,
        }
        shown = figures[mode]
        print(
            f"  {mode:<11} py-spy CPU / serving CPU = {shown['py_spy_over_serving_cpu']:.3f} "
            f"(py-spy: {shown['py_spy_cores']:.3f} of a core while it samples); "
            f"serving throughput while sampled = {shown['throughput_vs_reference']:.2f}× "
            "the same round's unprofiled window"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
