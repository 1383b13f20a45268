"""Diagnosis through the real path (issue 6): every shipped scenario, from simulator to page.

For each scenario shipped with the simulator: simulate it in virtual time (compressed as in
``bench_alerts``: the same fleet, traffic, seed and faults, the fault over ``[10 min, 20 min)``
of a 20-minute run; the quiet day is the 20 minutes around its 14:00 peak, its busiest) after
a pre-roll (``--pre-roll``, an hour by default, ten minutes in the tests) that warms the
simulated servers and gives the store a past (its first two minutes dropped, the rest written
straight into the store: on an empty store one slow request in the first minute burns a
99.9 % budget). Then drive the run through the production
path in virtual time, one evaluation interval (30 s) at a time:

* the requests that finished in the interval are exported as spans by the real
  ``opentelemetry-sdk`` exporters (``simulator.sinks.otlp``) to one real sidecar per instance
  (OTLP/HTTP receiver → spool → shipper → ``storage.writer``); the server and GPU samples of the
  interval, which a sidecar scrapes and reads from NVML, are written through ``storage.writer``;
* once the store holds them, the API's own jobs run at the interval's end (``create_app`` with
  a virtual clock: SLO evaluation under the default burn-rate policy → incidents → diagnosis →
  notification outbox, then the follow-up job that re-diagnoses firing incidents).

The SLOs are the fleet's (``simulator/scenarios/slos/fleet.yaml``: TTFT and TPOT per model and
fleet availability, 99.9 %). A single fault must open at least one incident, and every incident
must name the injected cause as its top cause, on the injected instance, with evidence naming
the injected signal — in the first page and in the last diagnosis; a mixed scenario's incidents
must each blame one of the injected causes, with both causes in their top two; the quiet day
must open no incident at all. One case is not a shipped scenario: ``total-outage``, the quiet
day with every request failing from ten minutes in — no cause in the vocabulary explains it,
so its incidents must say ``unknown`` for the whole scope with the error ratio as evidence.
Prints the accuracy table with the time from fault onset to the first notification in the
outbox (the page enters it in the evaluation that opens the incident). Each scenario gets a
store of its own (a temporary SQLite file, or ``--store`` emptied first); ``--jobs N`` runs
scenarios in N processes.

Without ``--scenario`` / ``--shipped`` it runs the adversarial scenario matrix of issue 13
instead (``diagnosis_matrix``: every single fault × GPU telemetry on/off × 1 or 2 data-parallel
engines × server spans only or client spans in the same trace, overlapping faults, low
traffic, quiet cells; each fault clears and the run goes on 20 minutes), printing a progress
line per cell and the accuracy table; ``--quick`` is its smoke subset (the suite runs it).

    python bench/bench_diagnosis.py [--quick] [--cell TEXT ...] [--out FILE] [--jobs N]
    python bench/bench_diagnosis.py --shipped | --scenario NAME ... [--store URL] [--pre-roll MIN]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

from harness import diagnosis_matrix
from harness.real_path import (
    OUTAGE,
    PRE_ROLL,
    PathOutcome,
    incidents_table,
    run_path,
    table,
)

from infersight.simulator.specs import shipped_scenarios


def run_one(name: str, store: str | None = None, pre_roll: timedelta = PRE_ROLL) -> PathOutcome:
    """``run_path`` on a store of its own (a temporary SQLite file unless ``store``)."""
    with diagnosis_matrix.scratch_store(store, "diagnosis.db") as (engine, tmp):
        return run_path(engine, name, tmp, pre_roll)


def main(argv: Sequence[str] | None = None) -> Sequence[PathOutcome | Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="store URL, emptied per scenario (default: SQLite)")
    parser.add_argument(
        "--scenario",
        action="append",
        help="shipped scenario name: run the shipped scenarios one by one instead of the matrix",
    )
    parser.add_argument("--shipped", action="store_true", help="every shipped scenario, one by one")
    parser.add_argument("--quick", action="store_true", help="the matrix's smoke subset")
    parser.add_argument("--cell", action="append", help="matrix cells whose name contains this")
    parser.add_argument("--out", help="also write the matrix's table to this file")
    parser.add_argument("--json", help="also write every cell's outcome as JSON to this file")
    parser.add_argument(
        "--table", help="print the table of a past run's --json file, judged again; run nothing"
    )
    parser.add_argument("--jobs", type=int, default=1, help="scenarios run in parallel")
    parser.add_argument(
        "--pre-roll",
        type=float,
        default=None,
        help="minutes of healthy past before each run (shipped scenarios: 60 by default, a "
        "full 1 h burn window, the tests use 10; the matrix: 10)",
    )
    args = parser.parse_args(argv)
    if args.scenario or args.shipped:
        return shipped(args)
    if args.table:
        text = Path(args.table).read_text(encoding="utf-8")
        if text.lstrip().startswith("["):
            document = json.loads(text)
        else:  # the JSON lines a run appends as it goes
            document = [json.loads(line) for line in text.splitlines() if line.strip()]
        outcomes = diagnosis_matrix.rejudged(document)
        print(diagnosis_matrix.table(outcomes))
        print()
        print(diagnosis_matrix.incidents_table(outcomes))
        return outcomes
    return matrix(args)


def matrix(args: argparse.Namespace) -> list[Any]:
    """The adversarial scenario matrix (``diagnosis_matrix``), cell by cell with progress."""
    cells = diagnosis_matrix.quick_cells() if args.quick else diagnosis_matrix.matrix_cells()
    if args.cell:
        cells = [c for c in cells if any(part in c.name for part in args.cell)]
    pre_roll_s = diagnosis_matrix.PRE_ROLL_S if args.pre_roll is None else args.pre_roll * 60
    groups: dict[Any, list[Any]] = {}
    for cell in sorted(cells, key=diagnosis_matrix.priority):
        groups.setdefault(diagnosis_matrix.simulation_key(cell), []).append(cell)
    started = time.perf_counter()
    print(f"{len(cells)} cells in {len(groups)} simulations, {args.jobs} job(s)", flush=True)
    progress = Path(args.json + ".lines") if args.json else None
    run = partial(_run_group, store=args.store, pre_roll_s=pre_roll_s, progress=progress)
    if args.jobs > 1 and not args.store:
        with ProcessPoolExecutor(args.jobs) as pool:
            done = [o for group in pool.map(run, groups.values()) for o in group]
    else:
        done = [o for group in map(run, groups.values()) for o in group]
    order = {cell: i for i, cell in enumerate(cells)}
    outcomes = sorted(done, key=lambda o: order[o.cell])
    wall = time.perf_counter() - started
    text = "\n\n".join(
        [
            diagnosis_matrix.table(outcomes),
            diagnosis_matrix.incidents_table(outcomes),
            f"{len(outcomes)} cells, {sum(o.sent for o in outcomes)} requests through the real "
            f"path, {wall:.0f} s wall with {args.jobs} job(s)",
        ]
    )
    print()
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    if args.json:
        document = [o.to_dict() for o in outcomes]
        Path(args.json).write_text(json.dumps(document, indent=1, default=str), encoding="utf-8")
    return outcomes


def _run_group(
    cells: Sequence[Any], store: str | None, pre_roll_s: float, progress: Path | None
) -> list[Any]:
    """One simulation's cells; each outcome is also appended to ``progress`` (JSON lines) as it
    finishes, so a run cut short still has a table (``--table FILE.lines``)."""
    out = []
    for cell in cells:
        outcome = diagnosis_matrix.run_one(cell, store, pre_roll_s)
        print(diagnosis_matrix.progress_line(outcome), flush=True)
        if progress is not None:
            line = json.dumps(outcome.to_dict(), default=str) + "\n"
            with progress.open("a", encoding="utf-8") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                f.write(line)
        out.append(outcome)
    return out


def shipped(args: argparse.Namespace) -> list[PathOutcome]:
    """Every shipped scenario (or ``--scenario``), one by one: the issue-6 accuracy table."""
    pre_roll = timedelta(minutes=60.0 if args.pre_roll is None else args.pre_roll)
    names = args.scenario or [*shipped_scenarios(), OUTAGE]
    started = time.perf_counter()
    if args.jobs > 1 and not args.store:
        with ProcessPoolExecutor(args.jobs) as pool:
            outcomes = list(pool.map(partial(run_one, pre_roll=pre_roll), names))
    else:
        outcomes = [run_one(name, args.store, pre_roll) for name in names]
    wall = time.perf_counter() - started
    print(table(outcomes))
    print()
    print(incidents_table(outcomes))
    print()
    print(f"{'scenario':24} {'requests':>8} {'wall s':>7} {'requests/s':>10}")
    for o in outcomes:
        print(f"{o.scenario:24} {o.requests:8d} {o.wall_s:7.1f} {o.requests / o.wall_s:10.0f}")
    print(f"all scenarios: {wall:.1f} s wall with {args.jobs} job(s)")
    return outcomes


if __name__ == "__main__":
    sys.exit(0 if all(o.passed for o in main()) else 1)
