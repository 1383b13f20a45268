"""Diagnosis benchmark (issue 6): accuracy on every shipped scenario, and what it costs.

For each scenario shipped with the simulator: run it in virtual time, write it into a store
through ``StoreSink`` → ``storage.writer`` (the real path from the store on), read the signals
of the incident window and of the reference window before it (``storage.signals``), diagnose
(``alerts.diagnose``) and compare with the ground truth. Prints the accuracy table and, per
scenario, the time of the signal reads next to the time of the pure diagnosis (the reference
measured in the same run: the engine's cost is noise next to the two store reads).

To keep a full run short, each scenario is *compressed*: the same fleet, traffic, seed and
faults (kind, instance, magnitude), with the fault moved to ``[10 min, 20 min)`` of a 20-minute
run; the reference window is ``[2 min, 10 min)`` (the first two minutes warm the servers up).
Each scenario is diagnosed twice: as simulated, and stored without its GPU samples (a fleet
whose sidecars run ``--gpu-source none``), where the expected causes are the fallbacks of
``simulator.faults.EXPECTED_CAUSE_WITHOUT_GPU`` and the diagnosis must state its missing
evidence. Then, unless ``--no-latency``: the time from fault onset to a notification in the
outbox, for a total outage under a 99.9 % availability SLO and for a queue backlog (the
shipped arrival surge under a TTFT SLO), next to the time the burn-rate condition became true
(the target: within two evaluation intervals of it).

The mixed scenario keeps its two overlapping faults (thermal throttling and an arrival surge on
different instances) over the same window; the quiet day keeps its first 20 minutes. Without
``--store`` a temporary SQLite file is used.

    python bench/bench_alerts.py [--store URL] [--scenario NAME ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from harness.scenarios import empty, evaluate, outage, simulate, store_batch, table, without_gpu
from sqlalchemy import Engine

from infersight.alerts.rules import load_rules
from infersight.simulator.events import Batch
from infersight.simulator.fleet import run_scenario
from infersight.simulator.sinks import MemorySink
from infersight.simulator.specs import load_scenario, shipped_scenarios
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.sql_store import SqlStore


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--scenario", action="append", help="scenario name (default: all)")
    parser.add_argument(
        "--no-latency", action="store_true", help="skip the onset → notification measurement"
    )
    args = parser.parse_args(argv)
    names = args.scenario or shipped_scenarios()
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_store_engine(args.store or f"sqlite:///{tmp}/bench-alerts.db")
        try:
            migrate.upgrade(engine)
            result = _run(engine, names)
            if not args.no_latency:
                rows = latency_cases(engine)
                print()
                print(latency_table(rows))
                result["latency"] = rows
            return result
        finally:
            engine.dispose()


def _run(engine: Engine, names: Sequence[str]) -> dict[str, Any]:
    pack = load_rules()
    outcomes, timings = [], []
    for name in names:
        t0 = time.perf_counter()
        scenario, batch = simulate(name)
        t1 = time.perf_counter()
        empty(engine)
        store_batch(engine, batch)
        t2 = time.perf_counter()
        outcome = evaluate(engine, scenario, pack)
        outcomes.append(outcome)
        timings.append((name, len(batch.completions), t1 - t0, t2 - t1, outcome))
        empty(engine)
        store_batch(engine, without_gpu(batch))
        outcomes.append(evaluate(engine, scenario, pack, gpu=False))
    print(table(outcomes))
    print()
    print(f"{'scenario':24} {'requests':>8} {'simulate s':>10} {'store s':>8} "
          f"{'signals ms':>10} {'diagnose ms':>11} {'diagnose/signals':>16}")  # fmt: skip
    for name, n, sim_s, store_s, o in timings:
        share = o.diagnose_s / o.signals_s if o.signals_s > 0 else float("nan")
        print(
            f"{name:24} {n:8d} {sim_s:10.2f} {store_s:8.2f} {o.signals_s * 1e3:10.1f} "
            f"{o.diagnose_s * 1e3:11.2f} {share:16.4f}"
        )
    return {
        "passed": sum(o.passed for o in outcomes),
        "total": len(outcomes),
        "outcomes": {o.scenario: o for o in outcomes},
    }


# -- Time from fault onset to a notification in the outbox ------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Latency:
    case: str
    condition_s: float | None
    """Fault onset → the burn-rate condition first true (scanned every ``SCAN_S``)."""
    notified_s: float | None
    """Fault onset → the first message in the outbox (evaluations every ``INTERVAL_S``)."""
    cause: str
    later: str = "-"
    """The stored diagnosis after re-diagnosis five minutes into the incident."""

    @property
    def lag_intervals(self) -> float | None:
        if self.condition_s is None or self.notified_s is None:
            return None
        return (self.notified_s - self.condition_s) / INTERVAL_S


INTERVAL_S: Final = 30.0
SCAN_S: Final = 5.0


class _Accepting:
    """A notifier that accepts everything (the outbox is what is measured)."""

    name = "recorder"

    def render(self, notification: Any) -> dict[str, Any]:
        return {"summary": notification.summary()}

    def send(self, payload: Any) -> Any:
        from infersight.alerts.notify import SendResult

        return SendResult(True)


def time_to_notification(
    engine: Engine, case: str, spec: Any, onset: datetime, horizon: timedelta
) -> Latency:
    """Evaluate ``spec`` every ``INTERVAL_S`` from ``onset`` through the app's listener chain
    (diagnosis → announcer → outbox) and scan the burn-rate condition every ``SCAN_S``."""
    from infersight.service.diagnosis import DiagnosisListener
    from infersight.service.evaluation import Evaluator, default_policy, status
    from infersight.service.notifications import Announcer
    from infersight.storage import incident_history, incidents, slo_store
    from infersight.storage.outbox import Outbox

    policy = default_policy()
    slo_store.put_slo(engine, spec, onset - timedelta(hours=1))
    clock_now = [onset]
    announcer = Announcer(SqlStore(engine), {"recorder": _Accepting()}, lambda: clock_now[0])
    listener = DiagnosisListener(SqlStore(engine), announce=announcer)
    evaluator = Evaluator(SqlStore(engine), policy, [listener])
    condition_s = None
    with SqlStore(engine).reading() as reader:
        t = 0.0
        while t <= horizon.total_seconds():
            at = onset + timedelta(seconds=t)
            with reader.events.cycle(at) as counter:
                current = status(counter, spec, policy, at)
            if current.evaluation.firing is not None:
                condition_s = t
                break
            t += SCAN_S
    notified_s, cause = None, "-"
    t = 0.0
    while t <= horizon.total_seconds():
        clock_now[0] = onset + timedelta(seconds=t)
        evaluator.run(clock_now[0])
        listener.refresh(clock_now[0])  # the follow-up job: a page that waited for evidence
        messages = Outbox(engine).messages()
        if messages:
            notified_s = t
            cause = str(json.loads(messages[0].payload)["summary"])
            break
        t += INTERVAL_S
    later = "-"
    if notified_s is not None:
        listener.refresh(onset + timedelta(seconds=notified_s + 300))
        [incident] = incidents.list_incidents(engine, "firing")
        # The newest diagnosis (the history's), not the headline the page named.
        entry = incident_history.last_diagnosis(engine, incident.id)
        if entry is not None and entry.diagnosis is not None:
            later = f"{entry.diagnosis['cause']} ({entry.diagnosis['confidence']:.0%})"
    return Latency(case, condition_s, notified_s, cause, later)


def latency_cases(engine: Engine) -> list[Latency]:
    from infersight.core.query import Selector
    from infersight.core.slo import Sli, SliKind, SloSpec

    out = []
    # 1. A total outage of the whole fleet under a 99.9 % availability SLO: the first hour of
    #    the quiet day, every request failing from 40 minutes in.
    quiet = dataclasses.replace(load_scenario("quiet-day"), duration_s=3600.0)
    sink = MemorySink()
    run_scenario(quiet, [sink])
    onset = quiet.start + timedelta(minutes=40)
    empty(engine)
    whole = Batch(tuple(sink.completions), tuple(sink.server_samples), tuple(sink.gpu_samples))
    store_batch(engine, outage(whole, onset))
    availability = SloSpec("availability", Sli(SliKind.AVAILABILITY), 0.999, timedelta(days=30))
    out.append(
        time_to_notification(
            engine, "total outage, 99.9 %", availability, onset, timedelta(minutes=10)
        )
    )
    # 2. A queue backlog: the shipped arrival surge (uncompressed), TTFT ≤ 200 ms at 99.9 %.
    surge = load_scenario("fault-arrival-surge")
    sink = MemorySink()
    run_scenario(surge, [sink])
    empty(engine)
    store_batch(
        engine,
        Batch(tuple(sink.completions), tuple(sink.server_samples), tuple(sink.gpu_samples)),
    )
    [fault] = surge.faults
    onset = surge.start + timedelta(seconds=fault.start_s)
    ttft = SloSpec(
        "ttft", Sli(SliKind.LATENCY, "ttft", 0.2), 0.999, timedelta(days=7),
        Selector(instance=fault.instance),
    )  # fmt: skip
    out.append(
        time_to_notification(
            engine, "queue backlog (arrival surge), TTFT 99.9 %", ttft, onset, timedelta(minutes=20)
        )
    )
    return out


def latency_table(rows: Sequence[Latency]) -> str:
    def s(v: float | None) -> str:
        return "never" if v is None else f"{v:.0f} s"

    lines = [
        f"evaluation interval {INTERVAL_S:.0f} s; condition scanned every {SCAN_S:.0f} s",
        f"{'case':44} {'onset→condition':>15} {'onset→outbox':>12} {'lag (intervals)':>15}"
        f"  {'re-diagnosed +5 min':22} notification",
    ]
    for r in rows:
        lag = "-" if r.lag_intervals is None else f"{r.lag_intervals:.2f}"
        lines.append(
            f"{r.case:44} {s(r.condition_s):>15} {s(r.notified_s):>12} {lag:>15}  {r.later:22} "
            f"{r.cause}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    result = main()
    sys.exit(0 if result["passed"] == result["total"] else 1)
