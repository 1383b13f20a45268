"""Fleet benchmark (issue 19, item 1): N sidecar shippers shipping into one PostgreSQL at once.

Each sidecar is its own OS process (``--worker``) running the real spool and shipper code
(``collector.spool.Spool``, ``collector.shipper.Shipper`` with the sidecar's defaults: a 2 s
reassembly window, a 2 s ship interval, batches of 2000) into the real store writer
(``storage.writer.open_writer``), with its own instance name and spool file. Its traffic is
made in the process: validated ``core.records.RequestRecord``s that started just now (vLLM
shaped, two models), encoded and spooled as the ingestor spools them (``Kind.RECORD`` entries,
ready after the window), in exports shaped like an OpenTelemetry SDK's defaults: one export as
soon as 512 spans are queued, at the latest every ``--export-max-s`` (5 s). OTLP decoding is
left out: it costs the sidecar, not the store (``bench/bench_collector.py`` measures it).

Prints, in one run on this machine, for N = 1, 4, 16, 64 sidecars (``--fleet``), with direct
connections and through PgBouncer in transaction pooling mode (``--modes``):

- **sustained requests/s**: the offered fleet rate is stepped up (``--start-rate``, × 2 per
  step, ``--step-s`` seconds each); a step is sustained when every sidecar fed ≥ 90 % of its
  share (a host too busy to generate the traffic fails the step as ``feed``), no shipment
  failed (``errors``) and the ship lag (the age of the oldest spooled record past its window,
  read from each spool every 0.5 s) stayed ≤ ``--lag-limit-s`` over the step's second half
  (``lag``: the store fell behind, so the backlog grows). The figure is the highest sustained
  step; stepping stops at the first failed one;
- **P99 acknowledgement → visible** at that step: per record, from the moment its spool append
  was durable (the sidecar would acknowledge the export then) to the moment the shipper's
  ``write_requests`` returned, i.e. its transaction had committed, so any reader's snapshot
  taken after sees it. Measured in the sidecar process (one clock), over every record
  committed in the step, in 10 ms buckets. It includes the 2 s window and the ship interval
  by design: that is what a dashboard sees;
- **PostgreSQL CPU**: CPU seconds of the benchmark database's backends (``pg_stat_activity``
  pids, read from ``/proc`` through psutil) over the step ÷ wall ÷ host cores; next to it
  the whole cluster's ``postgres`` processes (others' load on a shared host included), the
  sidecars' own CPU, and the host's;
- **connections**: the most ``pg_stat_activity`` client backends on the database seen in the
  step, and what the active ones waited on (sampled every 0.5 s: ``Lock:…`` would be writers
  serialised on rows, ``IO:WALSync`` the commit flush, ``CPU`` none).

References, same run: raw binary ``COPY`` of the same rows into an unindexed table and one
in-process store writer (no spool, batches of 2000), both from ``bench/bench_storage.py``,
timed before every configuration and after the last, so that each configuration has one just
before and one just after it; each fleet's rate is printed as a ratio to N=1 direct and to the
single writer (against the writer before and after it: median and min–max).

A throwaway database is created and dropped; the store is truncated between configurations.
Workers are killed on any error or Ctrl-C (they also exit when their stdin closes).
``--quick`` (N = 1, 2; seconds-long steps) is the smoke test's run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import psycopg
from bench_storage import fresh_postgres, reference_copy, synth
from harness.interleave import ratio_spread, spread
from harness.results import write_json
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("llama-3.1-8b", "llama-3.1-70b")
#: The OpenTelemetry SDK's ``BatchSpanProcessor`` defaults: an export once this many spans
#: are queued, and at the latest every ``--export-max-s``.
EXPORT_SPANS = 512
#: Latency histogram buckets (seconds per bucket).
BUCKET_S = 0.01
SAMPLE_S = 0.5
#: PgBouncer's server connections per database/user in ``pgbouncer`` mode.
POOL_SIZE = 8
SINGLE_THREADED = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def progress(message: str) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


# --- the sidecar process ---------------------------------------------------------------------


class TimedSink:
    """The store writer, noting when each record's batch committed (``write_requests``
    returned: the transaction is committed) against when its append was acknowledged."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.acked: dict[str, float] = {}
        self.latency: Counter[int] = Counter()
        self.committed = 0
        self.lock = threading.Lock()

    def write_requests(self, records: Any) -> Any:
        result = self.inner.write_requests(records)
        done = time.time()
        with self.lock:
            for record in records:
                acked = self.acked.pop(record.span_id, None)
                if acked is not None:
                    self.latency[int((done - acked) / BUCKET_S)] += 1
            self.committed += len(records)
        return result

    def write_gpu_samples(self, samples: Any) -> int:
        return int(self.inner.write_gpu_samples(samples))

    def write_server_samples(self, samples: Any) -> int:
        return int(self.inner.write_server_samples(samples))

    def take(self) -> tuple[Counter[int], int]:
        with self.lock:
            latency, committed = self.latency, self.committed
            self.latency, self.committed = Counter(), 0
        return latency, committed


def make_records(n: int, instance: str, rng: random.Random) -> list[Any]:
    """``n`` validated vLLM-shaped records that finished just now."""
    from infersight.core.records import RequestRecord

    now = datetime.now(UTC)
    out = []
    for i in range(n):
        ttft = rng.lognormvariate(math.log(0.09), 0.7)
        tpot = rng.lognormvariate(math.log(0.011), 0.25)
        outputs = rng.randint(1, 600)
        decode = tpot * (outputs - 1)
        queue = rng.expovariate(1 / 0.015)
        out.append(
            RequestRecord(
                trace_id=rng.getrandbits(128).to_bytes(16, "big").hex(),
                span_id=rng.getrandbits(64).to_bytes(8, "big").hex(),
                start=now - timedelta(seconds=ttft + decode),
                instance=instance,
                service="vllm",
                engine="vllm",
                model=MODELS[i % 2],
                tenant="default",
                priority="interactive",
                ttft_s=ttft,
                tpot_s=tpot,
                e2e_s=ttft + decode,
                queue_s=queue,
                prefill_s=max(0.0, ttft - queue),
                decode_s=decode,
                input_tokens=rng.randint(20, 3000),
                output_tokens=outputs,
                finish_reason="stop",
            )
        )
    return out


def worker_main(args: argparse.Namespace) -> None:
    """One sidecar: spool + shipper + store writer; steps told on stdin, figures on stdout."""
    from infersight.collector.assembly import Reassembly
    from infersight.collector.codec import Kind, encode_record
    from infersight.collector.metrics import CollectorMetrics
    from infersight.collector.shipper import Shipper, ShipPolicy
    from infersight.collector.spool import Entry, Spool, SpoolConfig
    from infersight.core.errors import Unavailable
    from infersight.storage.engine import create_store_engine
    from infersight.storage.writer import open_writer

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us (stdin, or a kill)
    rng = random.Random(args.instance)
    reassembly = Reassembly(args.window_s)
    spool = Spool(SpoolConfig(Path(args.spool)))
    engine = create_store_engine(args.store, **json.loads(args.engine_kwargs))
    sink = TimedSink(open_writer(engine))
    policy = ShipPolicy(idle_s=args.ship_interval_s, samples_every_s=10.0)
    shipper = Shipper(spool, sink, CollectorMetrics(), policy, reassembly=reassembly)
    stop = threading.Event()
    thread = shipper.start(stop)
    print(json.dumps({"ready": True}), flush=True)

    def lag() -> float:
        oldest = spool.oldest_ready_at([Kind.RECORD])
        return 0.0 if oldest is None else max(0.0, time.time() - oldest)

    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "stop":
            break
        rate, duration = float(words[1]), float(words[2])
        every = min(args.export_max_s, EXPORT_SPANS / rate) if rate > 0 else duration
        sink.take()
        step_began = time.time()
        start = time.monotonic()
        sent = acked = 0
        ack_s: list[float] = []
        lags: list[tuple[float, float]] = []
        next_export = start + rng.uniform(0, every)  # the fleet's exports are not in step
        next_sample = start
        while (now := time.monotonic()) < start + duration:
            if now >= next_sample:
                lags.append((now - start, lag()))
                next_sample += SAMPLE_S
            if now >= next_export:
                due = int(rate * (now - start)) - sent
                if due > 0:
                    records = make_records(due, args.instance, rng)
                    ready_at = reassembly.due_at(time.time())
                    entries = [
                        Entry(Kind.RECORD, r.trace_id, ready_at, encode_record(r)) for r in records
                    ]
                    before = time.time()
                    sent += due
                    with contextlib.suppress(Unavailable):  # spool full: the sidecar says busy
                        spool.append(entries).result()
                        done = time.time()
                        with sink.lock:
                            for r in records:
                                sink.acked[r.span_id] = done
                        ack_s.append(done - before)
                        acked += due
                next_export += every
            time.sleep(max(0.0, min(next_export, next_sample, start + duration) - time.monotonic()))
        latency, committed = sink.take()
        failed = shipper.last_error_at is not None and shipper.last_error_at >= step_began
        print(json.dumps({
            "sent": sent, "acked": acked, "committed": committed,
            "latency": {str(k): v for k, v in latency.items()},
            "lag": lags, "ship_errors": int(failed),
            "last_error": shipper.last_error[:200], "spool_records": spool.stats()[0],
            "ack_p50_s": float(np.median(ack_s)) if ack_s else None,
        }), flush=True)  # fmt: skip
    stop.set()
    thread.join(timeout=30)
    spool.close()
    engine.dispose()


# --- the fleet, seen from outside -------------------------------------------------------------


@dataclass
class Fleet:
    """N worker processes, each told its steps on stdin and answering one JSON line each."""

    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def start(self, n: int, store: str, workdir: Path, args: argparse.Namespace,
              engine_kwargs: dict[str, Any]) -> None:  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT), **dict.fromkeys(SINGLE_THREADED, "1")}
        for i in range(n):
            command = [
                sys.executable, str(Path(__file__).resolve()), "--worker",
                "--store", store, "--instance", f"sidecar-{i:03d}",
                "--spool", str(workdir / f"spool-{i:03d}"),
                "--window-s", str(args.window_s), "--ship-interval-s", str(args.ship_interval_s),
                "--export-max-s", str(args.export_max_s),
                "--engine-kwargs", json.dumps(engine_kwargs),
            ]  # fmt: skip
            self.procs.append(
                subprocess.Popen(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    env=env,
                    cwd=ROOT,
                )
            )
        for answer in self.answers(timeout=120 + 5 * n):
            assert answer.get("ready"), answer

    def tell(self, line: str) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(line + "\n")
            proc.stdin.flush()

    def answers(self, timeout: float) -> list[dict[str, Any]]:
        """One JSON line from each worker, in worker order."""
        out: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            for i, proc in enumerate(self.procs):
                assert proc.stdout is not None
                selector.register(proc.stdout, selectors.EVENT_READ, i)
            while len(out) < len(self.procs):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self.procs) - len(out)} sidecars did not answer")
                for key, _ in selector.select(left):
                    i = key.data
                    line = key.fileobj.readline()  # type: ignore[union-attr]
                    if not line:
                        code = self.procs[i].wait()
                        raise RuntimeError(f"sidecar {i} exited with {code}")
                    out[i] = json.loads(line)
                    selector.unregister(key.fileobj)
        return [out[i] for i in range(len(self.procs))]

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(OSError):
                assert proc.stdin is not None
                proc.stdin.close()
        deadline = time.monotonic() + 30
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()

    def kill(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(OSError):
                proc.kill()
        for proc in self.procs:
            proc.wait()
        self.procs.clear()


class CpuMeter:
    """CPU seconds used by a changing set of processes between ``start`` and ``stop``."""

    def __init__(self) -> None:
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}

    def see(self, pids: list[int], starting: bool = False) -> None:
        for pid in pids:
            try:
                times = psutil.Process(pid).cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            used = times.user + times.system
            if starting:
                self.first.setdefault(pid, used)
            else:
                self.first.setdefault(pid, 0.0)  # born during the step
            self.last[pid] = used

    def seconds(self) -> float:
        return sum(self.last[pid] - self.first.get(pid, 0.0) for pid in self.last)


def postgres_pids() -> list[int]:
    return [p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "postgres"]


class Sampler(threading.Thread):
    """PostgreSQL as seen from outside while a step runs: backends, their waits, CPU."""

    def __init__(self, admin_dsn: str, database: str, fleet_pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.admin_dsn, self.database, self.fleet_pids = admin_dsn, database, fleet_pids
        self.halt = threading.Event()
        self.backends, self.cluster, self.fleet = CpuMeter(), CpuMeter(), CpuMeter()
        self.connections = 0
        self.waits: Counter[str] = Counter()
        self.samples = 0
        self.host_before = psutil.cpu_times()
        self.started = time.monotonic()

    def _backends(self, connection: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
        return connection.execute(
            "SELECT pid, state, wait_event_type, wait_event FROM pg_stat_activity "
            "WHERE datname = %s AND backend_type = 'client backend'",
            (self.database,),
        ).fetchall()

    def run(self) -> None:
        with psycopg.connect(self.admin_dsn, autocommit=True) as connection:
            rows = self._backends(connection)
            self.backends.see([r[0] for r in rows], starting=True)
            self.cluster.see(postgres_pids(), starting=True)
            self.fleet.see(self.fleet_pids, starting=True)
            while not self.halt.wait(SAMPLE_S):
                rows = self._backends(connection)
                self.samples += 1
                self.connections = max(self.connections, len(rows))
                for _pid, state, kind, event in rows:
                    if state == "active":
                        self.waits[f"{kind}:{event}" if kind else "CPU"] += 1
                self.backends.see([r[0] for r in rows])
            self.cluster.see(postgres_pids())
            self.fleet.see(self.fleet_pids)

    def finish(self) -> dict[str, Any]:
        self.halt.set()
        self.join()
        wall = time.monotonic() - self.started
        cores = psutil.cpu_count() or 1
        after = psutil.cpu_times()
        busy = sum(after) - after.idle - getattr(after, "iowait", 0.0)
        busy -= sum(self.host_before) - self.host_before.idle
        busy += getattr(self.host_before, "iowait", 0.0)
        return {
            "pg_cpu": self.backends.seconds() / wall / cores,
            "cluster_cpu": self.cluster.seconds() / wall / cores,
            "fleet_cpu": self.fleet.seconds() / wall / cores,
            "host_cpu": busy / wall / cores,
            "connections": self.connections,
            "waits": dict(self.waits.most_common()),
            "samples": self.samples,
        }


def quantile(histogram: Counter[int], q: float) -> float | None:
    total = sum(histogram.values())
    if not total:
        return None
    rank, seen = q * total, 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen >= rank:
            return (bucket + 1) * BUCKET_S
    return (max(histogram) + 1) * BUCKET_S


def seconds(value: float | None) -> str:
    """A histogram's quantile for a progress line (``None``: nothing was committed)."""
    return "-" if value is None else f"{value:.2f} s"


def judge(rate: float, duration: float, answers: list[dict[str, Any]], lag_limit: float,
          n: int, export_max_s: float) -> dict[str, Any]:  # fmt: skip
    """One step's figures and whether it was sustained (see the module docstring)."""
    latency: Counter[int] = Counter()
    for a in answers:
        latency.update({int(k): v for k, v in a["latency"].items()})
    late_lag = max((lag for a in answers for t, lag in a["lag"] if t >= duration / 2), default=0.0)
    # A sidecar's last export of a step may fall up to one export interval before its end.
    every = min(export_max_s, EXPORT_SPANS / (rate / n))
    fed = min(a["sent"] for a in answers) / (rate / n * max(duration - every, duration / 2))
    errors = sum(a["ship_errors"] for a in answers)
    reasons = []
    if fed < 0.9:
        reasons.append("feed")
    if errors:
        reasons.append("errors")
    if late_lag > lag_limit:
        reasons.append("lag")
    return {
        "offered_per_s": rate,
        "acked_per_s": sum(a["acked"] for a in answers) / duration,
        "committed_per_s": sum(a["committed"] for a in answers) / duration,
        "p50_ack_visible_s": quantile(latency, 0.5),
        "p99_ack_visible_s": quantile(latency, 0.99),
        "max_lag_s": late_lag,
        "ship_errors": errors,
        "last_error": next((a["last_error"] for a in answers if a["last_error"]), ""),
        "backlog": sum(a["spool_records"] for a in answers),
        "sustained": not reasons,
        "failed_on": reasons,
    }


def truncate(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("TRUNCATE requests, request_rollups")
        connection.execute("CHECKPOINT")


def run_config(mode: str, n: int, url: str, admin_dsn: str, database: str, workdir: Path,
               args: argparse.Namespace,
               engine_kwargs: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """Start N sidecars, step the rate until one fails, stop them: the configuration's row."""
    fleet = Fleet()
    steps: list[dict[str, Any]] = []
    spools = Path(tempfile.mkdtemp(prefix=f"{mode}-{n}-", dir=workdir))
    try:
        started = time.monotonic()
        fleet.start(n, url, spools, args, engine_kwargs)
        progress(f"{mode} N={n}: {n} sidecars up in {time.monotonic() - started:.1f} s")
        rate = args.start_rate
        while rate <= args.max_rate:
            sampler = Sampler(admin_dsn, database, fleet.pids())
            sampler.start()
            fleet.tell(f"step {rate / n} {args.step_s}")
            answers = fleet.answers(timeout=args.step_s * 4 + 60)
            step = (
                judge(rate, args.step_s, answers, args.lag_limit_s, n, args.export_max_s)
                | sampler.finish()
            )
            steps.append(step)
            progress(
                f"{mode} N={n} {rate:,.0f}/s: committed {step['committed_per_s']:,.0f}/s, "
                f"P99 {seconds(step['p99_ack_visible_s'])}, lag {step['max_lag_s']:.1f} s, "
                f"PG {step['pg_cpu']:.0%}, fleet {step['fleet_cpu']:.0%}, "
                f"conns {step['connections']}, "
                + ("ok" if step["sustained"] else f"FAILED on {'+'.join(step['failed_on'])}")
            )
            if not step["sustained"]:
                break
            rate *= 2
        fleet.stop()
    except BaseException:
        fleet.kill()
        raise
    ok = [s for s in steps if s["sustained"]]
    best = ok[-1] if ok else None
    return {"mode": mode, "n": n, "sustained_per_s": best["offered_per_s"] if best else 0.0,
            "at": best, "failed": steps[-1] if steps and not steps[-1]["sustained"] else None,
            "steps": steps}  # fmt: skip


# --- references ------------------------------------------------------------------------------


def references(url: str, count: int) -> dict[str, float]:
    from infersight.storage.engine import create_store_engine
    from infersight.storage.writer import open_writer

    rng = np.random.default_rng(19)
    records = synth(rng, datetime.now(UTC) - timedelta(minutes=30), count, 1800.0)
    copy = reference_copy(url, records, 2000)
    engine = create_store_engine(url)
    writer = open_writer(engine)
    started = time.perf_counter()
    for i in range(0, len(records), 2000):
        writer.write_requests(records[i : i + 2000])
    single = len(records) / (time.perf_counter() - started)
    engine.dispose()
    return {"copy_per_s": copy, "writer_per_s": single}


@contextlib.contextmanager
def through(mode: str, url: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The store URL and engine arguments a sidecar uses in ``mode``."""
    if mode == "direct":
        yield url, {}
        return
    from harness.pgbouncer import running_pgbouncer

    with running_pgbouncer(url, pool_size=POOL_SIZE) as bouncer:
        # Debian's PgBouncer 1.18 keeps no prepared statements across transactions.
        yield bouncer.url, {"connect_args": {"prepare_threshold": None}}


def median_refs(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}


def print_table(rows: list[dict[str, Any]], ref_rounds: list[dict[str, float]]) -> None:
    """The table; ``ref_rounds``: the references timed before each row and after the last
    (``ref_rounds[i]`` and ``[i + 1]`` bracket row ``i``): ×writer against both, median
    (min–max)."""
    reference = next((r["sustained_per_s"] for r in rows if r["mode"] == "direct" and r["n"] == 1),
                     0.0)  # fmt: skip
    refs = median_refs(ref_rounds)
    copy_ratio = ratio_spread(
        [r["writer_per_s"] for r in ref_rounds], [r["copy_per_s"] for r in ref_rounds]
    )
    print(f"reference: raw binary COPY {refs['copy_per_s']:,.0f} records/s; one store writer "
          f"(no spool) {refs['writer_per_s']:,.0f} records/s "
          f"({copy_ratio.text()} COPY); medians of {len(ref_rounds)} timings, before each row "
          "and after the last; ×writer: against the writer before and after the row")  # fmt: skip
    head = (f"{'mode':<9} {'N':>3} {'sustained/s':>11} {'×N=1':>6} {'×writer':>19} "
            f"{'P50 ack→vis':>11} {'P99 ack→vis':>11} {'PG CPU':>6} {'cluster':>7} "
            f"{'sidecars':>8} {'host':>5} {'conns':>5}  limit (first failed step)")  # fmt: skip
    print(head)
    for row in rows:
        at = row["at"] or {}
        failed = row["failed"]
        why = "none up to --max-rate" if failed is None else (
            f"{'+'.join(failed['failed_on'])} at {failed['offered_per_s']:,.0f}/s"
            + (f" ({failed['last_error'][:60]})" if failed["last_error"] else "")
        )  # fmt: skip

        def pct(key: str, at: dict[str, Any] = at) -> str:
            return f"{at[key]:.0%}" if key in at else "-"

        def sec(key: str, at: dict[str, Any] = at) -> str:
            return seconds(at.get(key))

        rate = row["sustained_per_s"]
        around = ref_rounds[rows.index(row) : rows.index(row) + 2]
        versus = spread([rate / r["writer_per_s"] for r in around])
        row["writer_ratio"] = versus.as_dict()
        print(
            f"{row['mode']:<9} {row['n']:>3} {rate:>11,.0f} "
            f"{rate / reference if reference else 0:>5.2f}× "
            f"{versus.text().replace(', 2 rounds', ''):>19} "
            f"{sec('p50_ack_visible_s'):>11} {sec('p99_ack_visible_s'):>11} {pct('pg_cpu'):>6} "
            f"{pct('cluster_cpu'):>7} {pct('fleet_cpu'):>8} {pct('host_cpu'):>5} "
            f"{at.get('connections', '-'):>5}  {why}"
        )
        if at.get("waits"):
            top = ", ".join(f"{k} {v}" for k, v in list(at["waits"].items())[:4])
            print(f"{'':<14}active backends waiting on (samples): {top}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="an admin URL; a throwaway database is made next to it")  # fmt: skip
    parser.add_argument("--fleet", default="1,4,16,64", help="sidecar counts, comma-separated")
    parser.add_argument("--modes", default="direct,pgbouncer")
    parser.add_argument("--start-rate", type=float, default=1000.0, help="fleet records/s")
    parser.add_argument("--max-rate", type=float, default=64000.0)
    parser.add_argument("--step-s", type=float, default=20.0)
    parser.add_argument("--lag-limit-s", type=float, default=6.0)
    parser.add_argument("--window-s", type=float, default=2.0)
    parser.add_argument("--ship-interval-s", type=float, default=2.0)
    parser.add_argument("--export-max-s", type=float, default=5.0)
    parser.add_argument("--reference-records", type=int, default=40_000)
    parser.add_argument("--quick", action="store_true", help="N = 1, 2; 4 s steps (smoke)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--instance", help=argparse.SUPPRESS)
    parser.add_argument("--spool", help=argparse.SUPPRESS)
    parser.add_argument("--engine-kwargs", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(args)
        return {}
    if args.quick:
        args.fleet, args.step_s, args.export_max_s = "1,2", 4.0, 0.5
        args.start_rate, args.max_rate, args.reference_records = 200.0, 400.0, 4000
    fleet_sizes = [int(n) for n in args.fleet.split(",")]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if any(m not in ("direct", "pgbouncer") for m in modes) or not fleet_sizes:
        parser.error("--modes takes direct and/or pgbouncer; --fleet at least one count")
    from infersight.storage import migrate
    from infersight.storage.engine import create_store_engine

    url, drop = fresh_postgres(args.postgres)
    database = make_url(url).database
    admin_dsn = make_url(args.postgres).set(drivername="postgresql").render_as_string(False)
    dsn = make_url(url).set(drivername="postgresql").render_as_string(False)
    rows: list[dict[str, Any]] = []
    try:
        engine = create_store_engine(url)
        migrate.upgrade(engine)
        engine.dispose()
        ref_rounds: list[dict[str, float]] = []

        def reference_round() -> None:
            truncate(dsn)
            ref_rounds.append(references(url, args.reference_records))
            progress(f"references: COPY {ref_rounds[-1]['copy_per_s']:,.0f}/s, "
                     f"writer {ref_rounds[-1]['writer_per_s']:,.0f}/s")  # fmt: skip

        # The references bracket every configuration: timed before each and after the last.
        with tempfile.TemporaryDirectory() as tmp:
            for mode in modes:
                with through(mode, url) as (store, engine_kwargs):
                    for n in fleet_sizes:
                        reference_round()
                        truncate(dsn)
                        rows.append(run_config(mode, n, store, admin_dsn, str(database),
                                               Path(tmp), args, engine_kwargs))  # fmt: skip
        reference_round()
        print_table(rows, ref_rounds)
    finally:
        drop()
    refs = {**median_refs(ref_rounds), "rounds": ref_rounds}
    results = {"references": refs, "fleet": rows, "settings": {
        k: getattr(args, k) for k in ("step_s", "lag_limit_s", "window_s", "ship_interval_s",
                                      "export_max_s", "start_rate", "max_rate")}}  # fmt: skip
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
