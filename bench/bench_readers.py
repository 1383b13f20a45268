"""Reader benchmark (issue 19): many concurrent readers of a real ``infersight serve``.

Prints, in one run on this machine, for ``serve --workers 1`` and ``--workers N`` (``--workers``)
with the answer cache on (``dashboard_answer_ttl_s``, 5 s by default) and, as a reference row,
off (``INFERSIGHT_DASHBOARD_ANSWER_TTL_S=0``, at the largest N): with 16 and 64 concurrent
clients (``--clients``), each on its own keep-alive connection and asking in turn for

* ``GET /api/v1/latency?metric=ttft&range=30d``,
* ``GET /api/v1/cost?range=30d``,
* ``GET /ui/overview?range=30d`` (the dashboard's Overview page),

the requests/s served in total and each one's P50 / P99, over ``--seconds`` per client count,
while the service's own SLO evaluation job runs every ``--interval`` seconds (``--slos``
SLOs) and a sidecar-like writer ships a batch of 50 requests a second
(``harness.concurrent.shipping``). The evaluation cycles done and the runs APScheduler skipped
("maximum number of running instances reached") are counted per phase from every worker's
``/healthz`` and from the service's log.

The reference, measured in the same run against the same process(es), timed before each
client count's phase and after the last (so each phase has one just before and one just
after it, under the same jobs and writer): each request alone, sequentially (``--repeats``
times, after one warm-up), its 30 days given as a start/end that no other request asks, so it
is computed, not served from the answer cache. The ratios printed are the total requests/s
over one sequential client's (the mean of the three references), and each P99 over its
request's reference, each against the reference before and after the phase: median and
spread (min–max). Today's figures (issue 19, one
process, before the cache) are printed beside them: 16 clients, 4.5 requests/s in total, P50
3.2–3.4 s, P99 about 5 s; the goal at 16 clients: ≥ 90 requests/s in total, every P99 < 1 s.

Everything is real: ``infersight serve`` subprocesses (through ``infersight.cli.main``, as
the ``infersight`` command runs it) over HTTP on loopback, on a PostgreSQL database of
``--days`` days at ``--rpm`` requests a minute ending now (``bench_storage.load_days``; the
default, 3 a minute over 30 days, is the size of the issue's 134 k-request store) with the
Overview's extras (``bench_dashboard.load_extras``: GPU samples, SLOs, a baseline, a load-test
run), dropped afterwards unless ``--keep``; ``--url`` reuses one kept earlier. The clients
share the machine with the service and PostgreSQL (one asyncio process, one connection each).
``--quick`` is a smoke run of all of it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import bench_api
import bench_dashboard
import bench_storage
import httpx
import numpy as np
from harness.concurrent import Shipped, shipping
from harness.interleave import spread
from harness.results import write_json

from infersight.api.settings import ApiSettings
from infersight.storage import migrate, slo_store
from infersight.storage.engine import create_store_engine

ROOT: Final = Path(__file__).resolve().parents[1]
TARGETS: Final = {
    "latency": ("/api/v1/latency", {"metric": "ttft", "range": "30d"}),
    "cost": ("/api/v1/cost", {"range": "30d"}),
    "overview": ("/ui/overview", {"range": "30d"}),
}
#: What ``range=30d`` covers, given as start/end for the reference.
SPAN: Final = timedelta(days=30)
#: Issue 19's measurement (one process, no answer cache): 16 clients.
TODAY: Final = {"clients": 16, "rps": 4.5, "p50_s": "3.2–3.4", "p99_s": 5.0}
GOAL_RPS: Final = 90.0
GOAL_P99_MS: Final = 1000.0
#: APScheduler's warning when a tick comes while the previous run still goes.
SKIPPED: Final = re.compile(r"tick_evaluation.*skipped: maximum number of running instances")


def progress(message: str) -> None:
    print(message, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Service:
    """One ``infersight serve --workers N`` subprocess."""

    url: str
    workers: int
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def skipped_in_log(self) -> int:
        return sum(1 for line in self.output().splitlines() if SKIPPED.search(line))

    def health(self) -> dict[int, dict[str, Any]]:
        """Every worker's ``/healthz`` body, by worker (1 for a single process): asked on new
        connections until each worker has answered (the kernel picks who accepts)."""
        seen: dict[int, dict[str, Any]] = {}
        for _ in range(50 * self.workers):
            body = httpx.get(f"{self.url}/healthz", timeout=30).json()
            seen[int(body.get("worker", 1))] = body
            if len(seen) == self.workers:
                break
        return seen


def jobs_of(health: dict[int, dict[str, Any]]) -> dict[str, int]:
    """Evaluation cycles done and skipped, summed over the workers (one leader does them)."""
    return {
        "evaluations": sum(b["jobs"].get("evaluate", 0) for b in health.values()),
        "skipped": sum(b.get("jobs_skipped", {}).get("evaluate", 0) for b in health.values()),
        "workers_seen": len(health),
    }


@contextmanager
def serving(url: str, workers: int, answer_ttl_s: float, interval_s: float) -> Iterator[Service]:
    """``infersight serve --workers`` on a free loopback port over ``url``, its jobs on, until
    every worker answers ``/healthz``; stopped with SIGTERM on leaving."""
    port = free_port()
    handle, name = tempfile.mkstemp(prefix=f"bench-readers-serve-{port}-", suffix=".log")
    os.close(handle)
    log = Path(name)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "INFERSIGHT_DATABASE_URL": url,
        "INFERSIGHT_RUN_JOBS": "true",
        "INFERSIGHT_EVALUATION_INTERVAL_S": str(interval_s),
        "INFERSIGHT_DASHBOARD_ANSWER_TTL_S": str(answer_ttl_s),
        # 30 days of raw rows and minute rollups stay; the benchmark reads them all.
        "INFERSIGHT_RAW_RETENTION_DAYS": "60",
        "INFERSIGHT_MINUTE_ROLLUP_RETENTION_DAYS": "60",
        "INFERSIGHT_API_TOKENS": "",
    }
    command = [
        sys.executable, "-c", "from infersight.cli import main; main()",
        "serve", "--listen", f"127.0.0.1:{port}", "--workers", str(workers),
    ]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
    service = Service(f"http://127.0.0.1:{port}", workers, process, log)
    try:
        seen: set[int] = set()
        while len(seen) < workers:  # no deadline: a loaded machine only waits longer
            if process.poll() is not None:
                raise RuntimeError(f"serve exited ({process.returncode}):\n{service.output()}")
            try:
                health = httpx.get(f"{service.url}/healthz", timeout=30)
                if health.status_code == 200:
                    seen.add(int(health.json().get("worker", 1)))
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        yield service
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.unlink(missing_ok=True)


def uncached(params: dict[str, str], shift_s: int) -> dict[str, str]:
    """``params`` with ``range=30d`` given as its own start/end, ``shift_s`` seconds earlier:
    a query string the answer cache has not seen, so the answer is computed."""
    end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=shift_s)
    out = {k: v for k, v in params.items() if k != "range"}
    return out | {"start": (end - SPAN).isoformat(), "end": end.isoformat()}


def reference(service: Service, repeats: int) -> dict[str, float]:
    """Each request alone, one after the other, computed (never from the answer cache): its
    median ms (after one warm-up)."""
    out: dict[str, float] = {}
    with httpx.Client(base_url=service.url, timeout=120) as client:
        for name, (path, params) in TARGETS.items():
            client.get(path, params=params).raise_for_status()
            times = []
            for shift in range(1, repeats + 1):
                query = uncached(params, shift)
                started = time.perf_counter()
                client.get(path, params=query).raise_for_status()
                times.append(time.perf_counter() - started)
            out[name] = float(np.median(times) * 1000)
    return out


async def _readers(url: str, clients: int, seconds: float) -> dict[str, Any]:
    times: dict[str, list[float]] = {name: [] for name in TARGETS}
    errors: dict[str, int] = {}
    names = list(TARGETS)
    deadline = time.monotonic() + seconds

    async def reader(index: int) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
            turn = index
            while time.monotonic() < deadline:
                name = names[turn % len(names)]
                path, params = TARGETS[name]
                turn += 1
                started = time.perf_counter()
                try:
                    response = await client.get(path, params=params)
                except httpx.HTTPError as exc:
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                    continue
                elapsed = time.perf_counter() - started
                if response.status_code == 200:
                    times[name].append(elapsed)
                else:
                    errors[str(response.status_code)] = errors.get(str(response.status_code), 0) + 1

    async def report() -> None:
        begun = time.monotonic()
        while time.monotonic() < deadline:
            await asyncio.sleep(min(5.0, max(0.1, deadline - time.monotonic())))
            done = sum(len(t) for t in times.values())
            spent = time.monotonic() - begun
            progress(f"    {clients} clients: {spent:4.0f} s, {done:,} answers, "
                     f"{done / spent:6.1f} req/s so far")  # fmt: skip

    started = time.monotonic()
    reporter = asyncio.create_task(report())
    await asyncio.gather(*(reader(i) for i in range(clients)))
    elapsed = time.monotonic() - started
    reporter.cancel()
    total = sum(len(t) for t in times.values())
    targets = {}
    for name, seconds_each in times.items():
        ms = np.asarray(seconds_each) * 1000 if seconds_each else np.asarray([np.nan])
        targets[name] = {
            "count": len(seconds_each),
            "p50": float(np.percentile(ms, 50)),
            "p99": float(np.percentile(ms, 99)),
        }
    return {
        "clients": clients,
        "seconds": elapsed,
        "answers": total,
        "rps": total / elapsed,
        "errors": errors,
        "targets": targets,
    }


def phase(service: Service, clients: int, seconds: float) -> dict[str, Any]:
    """``clients`` readers for ``seconds``, with the jobs' figures of the phase."""
    before, log_before = jobs_of(service.health()), service.skipped_in_log()
    figures = asyncio.run(_readers(service.url, clients, seconds))
    after, log_after = jobs_of(service.health()), service.skipped_in_log()
    figures["evaluations"] = after["evaluations"] - before["evaluations"]
    figures["skipped"] = after["skipped"] - before["skipped"]
    figures["skipped_in_log"] = log_after - log_before
    figures["workers_seen"] = after["workers_seen"]
    return figures


def one_client_rps(ref: dict[str, float]) -> float:
    """One sequential client's requests/s: the mean of the references' times."""
    return 1000.0 / float(np.mean(list(ref.values())))


def print_config(
    title: str, refs: list[dict[str, float]], phases: list[dict[str, Any]]
) -> dict[str, float]:
    """The config's table; ``refs``: the reference timed before each phase and after the last
    (``refs[i]`` and ``refs[i + 1]`` bracket phase ``i``): each ratio against both, median
    (min–max). Returns the reference's median per request over all its timings."""
    ref = {n: float(np.median([r[n] for r in refs])) for n in TARGETS}
    print(f"\n== {title} ==")
    print("  reference, each request alone: "
          + ", ".join(f"{name} {ms:.0f} ms" for name, ms in ref.items())
          + f"  (one sequential client: {one_client_rps(ref):.1f} req/s; median of "
          f"{len(refs)} timings, before each phase and after the last)")  # fmt: skip
    print(
        "  ratios: against the reference timed just before and just after the phase, "
        "median (min–max)"
    )
    print(f"  {'clients':>7} {'req/s':>7} {'× 1 client':>18}   "
          + "   ".join(f"{name + ' P50/P99 ms (P99 ×)':>32}" for name in TARGETS)
          + "   evaluations done/skipped  errors")  # fmt: skip
    for i, p in enumerate(phases):
        around = refs[i : i + 2]

        def fmt(values: list[float]) -> str:
            return spread(values).text("×", ".1f").replace(", 2 rounds", "")

        cells = "   ".join(
            f"{p['targets'][n]['p50']:9.0f} /{p['targets'][n]['p99']:6.0f}"
            f" ({fmt([p['targets'][n]['p99'] / r[n] for r in around]):>14})"
            for n in TARGETS
        )
        scale = fmt([p["rps"] / one_client_rps(r) for r in around])
        p["ratios"] = {
            "rps_to_one_client": [p["rps"] / one_client_rps(r) for r in around],
            "p99_to_reference": {n: [p["targets"][n]["p99"] / r[n] for r in around]
                                 for n in TARGETS},
        }  # fmt: skip
        skipped = max(p["skipped"], p["skipped_in_log"])
        errors = sum(p["errors"].values())
        print(f"  {p['clients']:>7} {p['rps']:7.1f} {scale:>18}   {cells}"
              f"   {p['evaluations']:>10} / {skipped:<10}  {errors}")  # fmt: skip
    return ref


def verdict(configs: list[dict[str, Any]]) -> dict[str, Any]:
    """Today's figures, and the best cached configuration at 16 clients against the goal."""
    print(f"\n  today (issue 19, 1 process, no cache): {TODAY['clients']} clients "
          f"{TODAY['rps']} req/s in total, P50 {TODAY['p50_s']} s, P99 ~{TODAY['p99_s']:.0f} s; "
          f"goal ≥ {GOAL_RPS:.0f} req/s, P99 < {GOAL_P99_MS:.0f} ms")  # fmt: skip
    rows = [
        (c, p) for c in configs if c["answer_ttl_s"] > 0 for p in c["phases"]
        if p["clients"] == TODAY["clients"]
    ]  # fmt: skip
    if not rows:
        print(f"  (no {TODAY['clients']}-client phase measured)")
        return {}
    config, best = max(rows, key=lambda row: row[1]["rps"])
    worst_p99 = max(t["p99"] for t in best["targets"].values())
    met = best["rps"] >= GOAL_RPS and worst_p99 < GOAL_P99_MS
    print(f"  best here at {TODAY['clients']} clients: --workers {config['workers']}: "
          f"{best['rps']:.1f} req/s ({best['rps'] / TODAY['rps']:.0f}× today's), worst P99 "
          f"{worst_p99:.0f} ms: goal {'met' if met else 'NOT met'}")  # fmt: skip
    return {"workers": config["workers"], "rps": best["rps"], "worst_p99_ms": worst_p99,
            "met": met}  # fmt: skip


def load(url: str, args: argparse.Namespace, now: datetime) -> None:
    started = time.perf_counter()
    loaded = bench_storage.load_days(
        url, args.days, args.rpm, now.replace(second=0, microsecond=0), seed=11
    )
    bench_dashboard.load_extras(url, bench_storage, args.days, now, args.gpu_interval)
    progress(f"  loaded {loaded:,} requests and GPU samples in "
             f"{time.perf_counter() - started:.0f} s")  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument("--url", help="a database loaded earlier (with --keep); skips loading")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--rpm", type=int, default=3, help="requests a minute in the store")
    parser.add_argument("--gpu-interval", type=int, default=60, help="seconds between samples")
    parser.add_argument("--slos", type=int, default=50, help="SLOs the evaluation job evaluates")
    parser.add_argument(
        "--interval",
        type=float,
        default=ApiSettings().evaluation_interval_s,
        help="evaluation interval, s (serve's default)",
    )
    parser.add_argument("--workers", default="1,2", help="comma-separated --workers to measure")
    parser.add_argument("--clients", default="16,64", help="comma-separated client counts")
    parser.add_argument("--seconds", type=float, default=60.0, help="per client count")
    parser.add_argument("--repeats", type=int, default=5, help="of each reference request")
    parser.add_argument(
        "--answer-ttl",
        type=float,
        default=ApiSettings().dashboard_answer_ttl_s,
        help="the answer cache, s (dashboard_answer_ttl_s)",
    )
    parser.add_argument("--no-cache-row", action="store_true", help="skip the cache-off row")
    parser.add_argument("--no-writer", action="store_true", help="no sidecar-like writer")
    parser.add_argument("--quick", action="store_true", help="a smoke run of every case")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.days, args.rpm, args.gpu_interval, args.slos = 1, 2, 600, 4
        args.interval, args.clients, args.seconds, args.repeats = 1.0, "2,4", 2.0, 1
        args.workers = "1,2"
    workers = [int(w) for w in args.workers.split(",")]
    clients = [int(c) for c in args.clients.split(",")]
    if args.answer_ttl <= 0:
        parser.error("--answer-ttl must be > 0 (the cache-off row is measured anyway)")
    now = datetime.now(UTC)
    drop, url = None, args.url
    if url is None:
        url, drop = bench_storage.fresh_postgres(args.postgres)
        load(url, args, now)
    engine = create_store_engine(url)
    if args.url is not None:  # a store kept by an older version: its schema as `serve` makes it
        migrate.upgrade(engine)
    runs = [(w, args.answer_ttl) for w in workers]
    if not args.no_cache_row:
        runs.append((max(workers), 0.0))
    results: dict[str, Any] = {"args": vars(args), "configs": []}
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("ANALYZE")
        for spec in bench_api.slo_specs(args.slos, bench_storage.MODELS, bench_storage.INSTANCES):
            slo_store.put_slo(engine, spec, now)
        results["slos"] = len(slo_store.list_slos(engine))
        for count, ttl in runs:
            cache = f"answer cache {ttl:g} s" if ttl else "answer cache off"
            title = (
                f"serve --workers {count}, {cache}, "
                f"{results['slos']} SLOs every {args.interval:g} s"
            )
            progress(f"\n  starting: {title}")
            with serving(url, count, ttl, args.interval) as service:
                phases = []
                writer: AbstractContextManager[Shipped | None] = (
                    nullcontext(None) if args.no_writer
                    else shipping(engine, lambda: datetime.now(UTC), bench_storage.synth)
                )  # fmt: skip
                with writer as shipped:
                    # The reference brackets every phase: timed before each and after the last.
                    refs = [reference(service, args.repeats)]
                    for n in clients:
                        progress(f"  {title}: {n} clients for {args.seconds:g} s")
                        phases.append(phase(service, n, args.seconds))
                        refs.append(reference(service, args.repeats))
            ref = print_config(title, refs, phases)
            results["configs"].append({
                "workers": count, "answer_ttl_s": ttl, "reference_ms": ref,
                "references_ms": refs, "phases": phases,
                "writer": shipped.figures() if shipped is not None else None,
            })  # fmt: skip
        results["today"] = TODAY
        results["goal"] = {"rps": GOAL_RPS, "p99_ms": GOAL_P99_MS}
        results["verdict"] = verdict(results["configs"])
    finally:
        engine.dispose()
        if drop is not None:
            if args.keep:
                print(f"  kept: {url}")
            else:
                drop()
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
