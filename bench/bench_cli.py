"""CLI start-up benchmark (#16): how long ``infersight`` takes to answer, per command.

Each command runs as a user runs it, in a fresh interpreter (``python -c "from infersight.cli
import main; main()" ARGS``), against a migrated SQLite store in a temporary directory with no
``INFERSIGHT_*`` variables set. Prints, in one run on this machine:

1. the same-run reference: the interpreter's own start (``python -c pass``), median of
   ``--runs``;
2. for ``--help``, ``--version``, ``slo list``, ``baseline list`` and ``db current``: the median
   wall and CPU time of ``--runs`` runs, and their ratios to the reference's (CPU time moves
   less than wall time on a loaded machine). The runs go in rounds, each running the
   reference and every command once, in ABBA order (``--order``; the reference first in one
   round, last in the next), so that a burst of load falls on all of them; each round's
   ratio is taken against its own reference, and the median and spread (min–max) of the
   rounds' ratios are printed;
3. ``python -X importtime`` of each command: the total of its top-level imports and the three
   largest;
4. with ``--compare DIR``: the same figures for the checkout in DIR (an older version, e.g.
   ``git worktree add /tmp/old main``), and how many times slower it is per command.

Figures are wall-clock times of this machine: compare the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.interleave import ORDERS, interleave, ratio_spread
from harness.results import write_json

ROOT = Path(__file__).resolve().parents[1]
CLI = "from infersight.cli import main; main()"
COMMANDS: dict[str, list[str]] = {
    "--help": ["--help"],
    "--version": ["--version"],
    "slo list": ["slo", "list"],
    "baseline list": ["baseline", "list"],
    "db current": ["db", "current"],
}


def environment(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERSIGHT_")}
    return {**env, "PYTHONPATH": str(tree)}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def once(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``command`` (which must succeed)."""
    cpu, start = _cpu(), time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{command} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return elapsed, _cpu() - cpu


#: The reference's name among the interleaved cases.
REFERENCE = "python -c pass"


def timings(
    tree: Path, store: str, runs: int, cwd: Path, order: str = "abba"
) -> dict[str, list[tuple[float, float]]]:
    """``runs`` rounds of (wall, CPU) times of the reference and every command, interleaved."""
    env = environment(tree)

    def command(args: list[str]) -> list[str]:
        store_args = [] if args[0].startswith("--") else ["--store", store]
        return [sys.executable, "-c", CLI, *store_args, *args]

    argvs = {REFERENCE: [sys.executable, "-c", "pass"]}
    argvs.update((name, command(args)) for name, args in COMMANDS.items())
    cases = {name: functools.partial(once, argv, env, cwd) for name, argv in argvs.items()}
    return interleave(cases, runs, order=order)


def importtime(tree: Path, store: str, args: list[str], cwd: Path) -> tuple[float, list[Any]]:
    """Seconds of ``infersight ARGS``'s top-level imports, and the three largest."""
    store_args = [] if args[0].startswith("--") else ["--store", store]
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", CLI, *store_args, *args],
        env=environment(tree),
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    rows = []
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)", line)
        if match and len(match.group(2)) <= 1:  # top-level imports only
            rows.append((int(match.group(1)) / 1e6, match.group(3)))
    return sum(s for s, _ in rows), sorted(rows, reverse=True)[:3]


def measure(tree: Path, runs: int, workdir: Path, label: str, order: str) -> dict[str, Any]:
    path = workdir / f"store-{len(list(workdir.glob('*.db')))}.db"
    store = f"sqlite:///{path}"
    once([sys.executable, "-c", CLI, "--store", store, "db", "upgrade"], environment(tree), tree)
    times = timings(tree, store, runs, workdir, order)
    ref_walls = [wall for wall, _ in times[REFERENCE]]
    ref_cpus = [cpu for _, cpu in times[REFERENCE]]
    ref, ref_cpu = statistics.median(ref_walls), statistics.median(ref_cpus)
    print(
        f"{label}: reference python -c pass {ref:.3f} s wall, {ref_cpu:.3f} s CPU"
        f" (medians of {runs} rounds, {order} order; ratios: median (min–max) of the rounds')"
    )
    figures: dict[str, Any] = {
        "reference_s": ref,
        "reference_cpu_s": ref_cpu,
        "reference_runs_s": ref_walls,
        "commands": {},
    }
    for name, args in COMMANDS.items():
        walls, cpus = [w for w, _ in times[name]], [c for _, c in times[name]]
        median, cpu = statistics.median(walls), statistics.median(cpus)
        wall_ratio, cpu_ratio = ratio_spread(walls, ref_walls), ratio_spread(cpus, ref_cpus)
        total, largest = importtime(tree, store, args, workdir)
        print(
            f"  infersight {name:<14} {median:6.3f} s ({wall_ratio.text('×', '.1f')}) wall,"
            f" {cpu:6.3f} s ({cpu_ratio.text('×', '.1f')}) CPU;  imports {total:.3f} s, largest: "
            + ", ".join(f"{module} {s:.3f} s" for s, module in largest)
        )
        figures["commands"][name] = {
            "median_s": median,
            "cpu_s": cpu,
            "runs_s": walls,
            "ratio_to_reference": wall_ratio.median,
            "ratio_spread": wall_ratio.as_dict(),
            "cpu_ratio_to_reference": cpu_ratio.median,
            "cpu_ratio_spread": cpu_ratio.as_dict(),
            "imports_s": total,
            "largest_imports": [{"module": m, "s": s} for s, m in largest],
        }
    return figures


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--runs", type=int, default=7, help="rounds: runs per command and of the reference"
    )
    parser.add_argument("--order", choices=ORDERS, default="abba", help="order within rounds")
    parser.add_argument("--compare", type=Path, default=None, help="another checkout to time")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        results["this_tree"] = measure(ROOT, args.runs, workdir, "this tree", args.order)
        if args.compare is not None:
            old = measure(
                args.compare.resolve(), args.runs, workdir, f"compare {args.compare}", args.order
            )
            results["compare"] = old
            for name in COMMANDS:
                new, was = results["this_tree"]["commands"][name], old["commands"][name]
                print(
                    f"  {name}: {args.compare} takes {was['median_s'] / new['median_s']:.2f}×"
                    f" this tree's wall time, {was['cpu_s'] / new['cpu_s']:.2f}× its CPU time"
                )
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
