"""Dashboard pages under many clients, answer cache off (issue 35, item 4).

Seeds a 30-day PostgreSQL store the way ``bench_dashboard`` does (``bench_storage.load_days``:
``--rpm`` requests a minute, two models on two instances; ``bench_dashboard.load_extras``: GPU
samples, SLOs evaluated once, a baseline, a step run; the maintenance job once; ``--slos``
more SLOs from ``bench_api.slo_specs``), its data ending now, then starts the real
``infersight serve`` over it (a subprocess on a free port, ``--workers`` processes, the
scheduled jobs on, ``INFERSIGHT_DASHBOARD_ANSWER_TTL_S=0`` so every page view computes).
After its first evaluation cycle (``/healthz`` counts it) it times every dashboard page of the
navigation, the newest incident's page and one SLO's page
(``GET /ui/<page>`` with a bearer token, over real HTTP) with 1 client and with ``--clients``
concurrent clients, in ``--rounds`` interleaved rounds (the order of the two phases alternates
round by round, so load drift on a shared machine moves both), each phase a fixed number of
passes over every page at every ``--ranges`` range.

Prints per page and range P50 / P99 for 1 and for N clients, and each round's throughput
(requests per second) with N clients against 1 client in the same round: the ratio's median
and its spread. Target: every page's P99 < 1 s with N clients.

With ``--before CHECKOUT`` both checkouts first render every page at one fixed time on their
own copies of the store (``harness/render_pages.py``) and the run stops unless every page's
HTML is identical (``--no-same-answers`` skips this): a faster page must answer the same.

With ``--before`` each serve runs on a copy of its own of the store (made alike, before either
starts). ``--url`` reuses a database seeded earlier with ``--keep`` (its data end where they ended).
``--quick`` is a smoke run (1 day, 2 req/min, 4 clients, 1 round).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from contextlib import ExitStack
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import bench_api
import bench_dashboard
import bench_storage
import httpx
import numpy as np
import psycopg
from harness import proctree
from harness.faults import READ_TOKEN, Live, start_serve, wait_until
from harness.results import write_json
from sqlalchemy.engine import make_url

from infersight.storage import migrate, slo_store
from infersight.storage.engine import create_store_engine
from infersight.storage.maintenance import RetentionPolicy, maintain

#: Every page of the navigation (``api.dashboard.routes.VIEWS``; a test keeps the two the
#: same), and one incident's page and one SLO's page.
PAGES = (
    "overview",
    "latency",
    "gpus",
    "cost",
    "budgets",
    "incidents",
    "baselines",
    "capacity",
    "scaling",
)
TARGET_MS = 1000.0
#: A guard against a serve that never evaluates (not a budget: a loaded machine waits).
EVALUATION_GUARD_S = 600.0
#: A guard against a render of every page that hangs (not a budget either).
RENDER_GUARD_S = 1800.0


def seed(args: argparse.Namespace, now: datetime) -> tuple[str, Any]:
    url, drop = bench_storage.fresh_postgres(args.postgres)
    started = time.perf_counter()
    end = now.replace(second=0, microsecond=0)
    loaded = bench_storage.load_days(url, args.days, args.rpm, end, seed=11)
    bench_dashboard.load_extras(url, bench_storage, args.days, now, args.gpu_interval)
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("ANALYZE")
        maintain(engine, now, RetentionPolicy(raw_days=60, minute_days=60, hour_days=180))
        for spec in bench_api.slo_specs(args.slos, bench_storage.MODELS, bench_storage.INSTANCES):
            slo_store.put_slo(engine, spec, now)
    finally:
        engine.dispose()
    print(f"  seeded {loaded:,} requests, GPU samples and "
          f"{args.slos + 5} SLOs in {time.perf_counter() - started:.0f} s")  # fmt: skip
    return url, drop


def copy_database(url: str, suffix: str = "copy") -> tuple[str, Any]:
    """A copy of ``url``'s database (``CREATE DATABASE … TEMPLATE``, named with ``suffix``)
    and its dropper."""
    source = make_url(url)
    name = f"{source.database}_{suffix}"
    dsn = source.set(drivername="postgresql", database="postgres").render_as_string(
        hide_password=False
    )
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
        connection.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source.database}"'.encode())

    def drop() -> None:
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())

    return source.set(database=name).render_as_string(hide_password=False), drop


def evaluated(live: Live) -> int:
    """Evaluation cycles the serve has run, 0 until its money job has run too (its
    ``/healthz``; 0 while it cannot say)."""
    try:
        body = httpx.get(f"{live.url}/healthz", timeout=30).json()
    except (httpx.HTTPError, ValueError):
        return 0
    status = str(body.get("status", ""))
    if "Can't locate revision" in status:  # it would wait for the store until the guard
        raise RuntimeError(
            f"{live.url}: the store is at a migration this checkout's code does not know "
            f"({status}); compare against a checkout that has every migration of the store "
            "(a worktree of HEAD with the changes under test reverted), or seed with its code"
        )
    runs = body.get("jobs") or {}
    # The pages show the evaluation's and the money job's last results: both have run once.
    return min(int(runs.get("evaluate", 0)), int(runs.get("money", 1)))


def calls(live: Live, ranges: list[str]) -> list[tuple[str, str, dict[str, str]]]:
    """``(name, path, params)`` for every page at every range (``default``: the page's own)."""
    out = []
    pages = [(page, f"/ui/{page}") for page in PAGES]
    found = httpx.get(
        f"{live.url}/api/v1/incidents",
        params={"limit": "1"},
        headers={"Authorization": f"Bearer {READ_TOKEN}"},
        timeout=60,
    )
    found.raise_for_status()
    listed = found.json()
    items = listed.get("incidents", listed) if isinstance(listed, dict) else listed
    if items:
        pages.append(("incident", f"/ui/incidents/{items[0]['id']}"))
    slos = httpx.get(
        f"{live.url}/api/v1/slos",
        headers={"Authorization": f"Bearer {READ_TOKEN}"},
        timeout=60,
    )
    slos.raise_for_status()
    listed_slos = slos.json()
    named = listed_slos.get("slos", listed_slos) if isinstance(listed_slos, dict) else listed_slos
    if named:  # SLO documents: the name is the document's metadata.name
        name = str(named[0]["metadata"]["name"])
        pages.append(("slo", f"/ui/slos/{quote(name, safe='')}"))
    for name, path in pages:
        for span in ranges:
            out.append((f"{name} {span}", path, {} if span == "default" else {"range": span}))
    return out


async def phase(
    url: str, plan: list[tuple[str, str, dict[str, str]]], clients: int, passes: int
) -> tuple[dict[str, list[float]], int, float]:
    """``clients`` concurrent clients, each making ``passes`` passes over ``plan`` (each
    starting at another page): seconds per call by name, the calls made and the wall time."""
    times: dict[str, list[float]] = {name: [] for name, _, _ in plan}
    headers = {"Authorization": f"Bearer {READ_TOKEN}"}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx.AsyncClient(
        base_url=url, headers=headers, timeout=300, limits=limits
    ) as client:

        async def one(offset: int) -> int:
            made = 0
            for _ in range(passes):
                for k in range(len(plan)):
                    name, path, params = plan[(offset + k) % len(plan)]
                    started = time.perf_counter()
                    response = await client.get(path, params=params)
                    times[name].append(time.perf_counter() - started)
                    response.raise_for_status()
                    made += 1
            return made

        started = time.perf_counter()
        made = await asyncio.gather(*(one(c * len(plan) // clients) for c in range(clients)))
        wall = time.perf_counter() - started
    return times, sum(made), wall


def postgres_cpu_seconds() -> float:
    """User + system seconds of every running process named ``postgres`` (the server, whose
    count holds the backends it has reaped, and its backends): this host's PostgreSQL serves
    the bench alone while it is timed, but for other users' backends, which count too."""
    return proctree.cpu_seconds(proctree.named("postgres"))


def ms(seconds: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(seconds) * 1000.0, q))


def measure(serves: dict[str, Live], args: argparse.Namespace) -> dict[str, Any]:
    """Every serve's pages with 1 and with ``args.clients`` clients, round by round; the
    serves (``after``, and ``before`` with ``--before``) and the two phases alternate in
    ABBA order, so that load drift moves every figure alike."""
    plans = {name: calls(live, args.ranges) for name, live in serves.items()}
    for name, live in serves.items():
        asyncio.run(phase(live.url, plans[name], 1, 1))  # warm-up: imports, templates
    n = args.clients
    times: dict[tuple[str, int], dict[str, list[float]]] = {
        (s, c): defaultdict(list) for s in serves for c in (1, n)
    }
    rates: dict[tuple[str, int], list[float]] = {(s, c): [] for s in serves for c in (1, n)}
    cases = [(s, c) for s in serves for c in (1, n)]
    #: CPU milliseconds per page view: the serve's process tree and PostgreSQL's processes.
    cpu: dict[tuple[str, int], list[tuple[float, float]]] = {case: [] for case in cases}
    for r in range(args.rounds):
        for serve, clients in cases if r % 2 == 0 else list(reversed(cases)):
            passes = args.passes if clients == 1 else 1
            pid = serves[serve].proc.pid
            serve_cpu, pg_cpu = proctree.tree_cpu_seconds(pid), postgres_cpu_seconds()
            got, made, wall = asyncio.run(phase(serves[serve].url, plans[serve], clients, passes))
            cpu[(serve, clients)].append((
                1000 * (proctree.tree_cpu_seconds(pid) - serve_cpu) / made,
                1000 * (postgres_cpu_seconds() - pg_cpu) / made,
            ))  # fmt: skip
            for page, seconds in got.items():
                times[(serve, clients)][page].extend(seconds)
            rates[(serve, clients)].append(made / wall)
        print(f"  round {r + 1}/{args.rounds}: " + ", ".join(
            f"{s} {c} client{'s' if c > 1 else ''} {rates[(s, c)][-1]:.2f} req/s"
            for s, c in cases), flush=True)  # fmt: skip
    out: dict[str, Any] = {}
    for serve in serves:
        out[serve] = report(serve, plans[serve], times, rates, serve, n)
        for clients in (1, n):
            each = cpu[(serve, clients)]
            app_ms = statistics.median(a for a, _ in each)
            pg_ms = statistics.median(p for _, p in each)
            print(f"  CPU per page view, {clients} client{'s' if clients > 1 else ''}: serve "
                  f"{app_ms:.1f} ms, PostgreSQL {pg_ms:.1f} ms (medians over the rounds; "
                  "every postgres process's, the jobs' queries included)")  # fmt: skip
            out[serve][f"cpu_ms_{clients}"] = {"serve": app_ms, "postgres": pg_ms}
    if "before" in serves:
        after, before = rates[("after", n)], rates[("before", n)]
        gain = [a / b for a, b in zip(after, before, strict=True)]
        print(f"\n  {n}-client throughput after / before, same round: median "
              f"{statistics.median(gain):.2f}× "
              f"(spread {min(gain):.2f}–{max(gain):.2f}×)")  # fmt: skip
        out["after_over_before"] = gain
    return out


def report(
    title: str,
    plan: list[tuple[str, str, dict[str, str]]],
    times: dict[tuple[str, int], dict[str, list[float]]],
    rates: dict[tuple[str, int], list[float]],
    serve: str,
    n: int,
) -> dict[str, Any]:
    print(f"\n== {title}: every page, answer cache off, 1 client vs {n} concurrent clients ==")
    print(f"  {'page range':<24} {'1: P50':>9} {'P99':>8}   {n}: P50 {'P99':>8}")
    pages: dict[str, Any] = {}
    worst = 0.0
    for name, _, _ in plan:
        a, b = times[(serve, 1)][name], times[(serve, n)][name]
        row = {"p50_1": ms(a, 50), "p99_1": ms(a, 99), "p50_n": ms(b, 50), "p99_n": ms(b, 99)}
        pages[name] = {**row, "samples_1": len(a), "samples_n": len(b)}
        worst = max(worst, row["p99_n"])
        verdict = "ok" if row["p99_n"] < TARGET_MS else "OVER"
        print(f"  {name:<24} {row['p50_1']:7.0f} ms {row['p99_1']:5.0f} ms   "
              f"{row['p50_n']:7.0f} ms {row['p99_n']:5.0f} ms  {verdict}")  # fmt: skip
    ratios = [m / o for m, o in zip(rates[(serve, n)], rates[(serve, 1)], strict=True)]
    median = statistics.median(ratios)
    print(f"  throughput {n} clients / 1 client, same round: median {median:.2f}× "
          f"(spread {min(ratios):.2f}–{max(ratios):.2f}× over {len(ratios)} rounds); "
          f"{n} clients: median {statistics.median(rates[(serve, n)]):.2f} req/s")  # fmt: skip
    print(f"  target: every page's P99 < {TARGET_MS:.0f} ms with {n} clients "
          f"(worst {worst:.0f} ms: {'ok' if worst < TARGET_MS else 'OVER'})")  # fmt: skip
    return {"pages_ms": pages, "rps_1": rates[(serve, 1)], f"rps_{n}": rates[(serve, n)],
            "ratio_median": median, "ratio_min": min(ratios), "ratio_max": max(ratios),
            "worst_p99_ms": worst}  # fmt: skip


def _frame(text: str) -> str:
    """``function (path)`` of one py-spy frame, its line number dropped."""
    found = re.match(r"(.*) \((.*?)(?::\d+)?\)$", text)
    if not found:
        return text
    path = found.group(2).split("site-packages/")[-1]
    return f"{found.group(1)} ({path})"


def top_frames(path: Path, count: int = 15) -> None:
    """The functions most often on the stack (inclusive, infersight's own) and on top (self
    time, any code), from py-spy's collapsed stacks."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = [_frame(f) for f in stack.split(";")]
        total += int(n)
        for frame in set(frames):
            inclusive[frame] += int(n)
        own[frames[-1]] += int(n)
    if not total:
        return
    print(f"  {total} samples; inclusive, infersight's functions:")
    ours = [(f, n) for f, n in inclusive.most_common() if "infersight/" in f]
    for frame, n in ours[:count]:
        print(f"    {100 * n / total:5.1f} %  {frame}")
    print("  self time, any code:")
    for frame, n in own.most_common(count):
        print(f"    {100 * n / total:5.1f} %  {frame}")


def same_answers(stores: dict[str, str], codes: dict[str, Path | None]) -> None:
    """Every page rendered by each checkout on its own (identical) store at one fixed time
    (``harness/render_pages.py``): the faster code must answer what the slower one does. A
    page that differs is named and the run stops."""
    at = datetime.now(UTC).replace(microsecond=0)
    script = Path(__file__).resolve().parent / "harness" / "render_pages.py"
    found = {}
    for name, code in codes.items():
        # Not the script's folder on the path: harness/concurrent.py would shadow the stdlib's.
        env = {**os.environ, "PYTHONSAFEPATH": "1"}
        if code is not None:
            env["PYTHONPATH"] = str(code)
        ran = subprocess.run(
            [sys.executable, str(script), stores[name], at.isoformat()],
            env=env, capture_output=True, text=True, timeout=RENDER_GUARD_S, check=False,
        )  # fmt: skip
        if ran.returncode:
            raise RuntimeError(f"rendering every page with {name}'s code failed:\n{ran.stderr}")
        found[name] = json.loads(ran.stdout)
    differ = sorted(k for k in found["after"].keys() | found["before"].keys()
                    if found["after"].get(k) != found["before"].get(k))  # fmt: skip
    if differ:
        raise RuntimeError(f"the two checkouts answer differently: {', '.join(differ)}")
    print(
        f"  same answers: every page at {at:%H:%M:%S} UTC, {len(found['after'])} renders "
        "(pages × ranges × cold and warm), identical HTML from both checkouts",
        flush=True,
    )


def _workers(name: str, args: argparse.Namespace) -> int:
    """A serve's worker processes: ``--workers``, or for ``before`` ``--before-workers``."""
    if name == "before" and args.before_workers is not None:
        return int(args.before_workers)
    return int(args.workers)


def _settings(name: str, args: argparse.Namespace) -> dict[str, str]:
    """A serve's extra settings: ``--env``, or for ``before`` ``--before-env``."""
    pairs = args.before_env if name == "before" and args.before_env is not None else args.env
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("INFERSIGHT_"):
            raise SystemExit(f"--env/--before-env take INFERSIGHT_NAME=VALUE, not {pair!r}")
        out[key] = value
    return out


def _stores(url: str, codes: dict[str, Path | None], copies: list[Any]) -> dict[str, str]:
    """Each serve's store: ``url`` for one serve; for two, a copy of its own each, made alike
    before any serve connects, so each serve's jobs lead on their own store and neither runs
    on the original (a serve on the original ran faster than the same code on a fresh copy:
    an A/A run, 1.11×, 1.02–1.25×). The copies' droppers are added to ``copies``."""
    if len(codes) == 1:
        return dict.fromkeys(codes, url)
    stores = {}
    for name in codes:
        stores[name], drop_copy = copy_database(url, name)
        copies.append(drop_copy)
    return stores


def timed_serves(url: str, args: argparse.Namespace, copies: list[Any]) -> dict[str, Any]:
    """Start the serves (this checkout's or ``--code``'s, and ``--before``'s; with two, each
    on a copy of the store), wait for their first evaluation cycle, time them (``measure``),
    py-spy them with ``--profile``; stopped on the way out (the copies' droppers are added to
    ``copies``)."""
    codes = {"after": args.code, **({"before": args.before} if args.before else {})}
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        serves: dict[str, Live] = {}
        profilers: dict[str, subprocess.Popen[bytes]] = {}
        stores = _stores(url, codes, copies)
        if "before" in codes and args.same_answers:
            same_answers(stores, codes)
        for name, code in codes.items():
            store = stores[name]
            env = {"INFERSIGHT_DASHBOARD_ANSWER_TTL_S": "0",
                   "INFERSIGHT_EVALUATION_INTERVAL_S": str(args.interval)}  # fmt: skip
            if code is not None:  # that checkout's code, not this one's (no cwd on sys.path)
                env.update(PYTHONPATH=str(code), PYTHONSAFEPATH="1")
            settings = _settings(name, args)
            env.update(settings)
            workers = _workers(name, args)
            extra = ("--workers", str(workers)) if workers > 1 else ()
            live = start_serve(store, Path(folder) / f"{name}.log", *extra, **env)
            stack.callback(live.stop)
            serves[name] = live
            print(f"  serve ({name}: {code or 'this checkout'}): {live.url}, answer cache off, "
                  f"{workers} worker(s), evaluation every {args.interval:g} s"
                  + "".join(f", {k}={v}" for k, v in settings.items()),
                  flush=True)  # fmt: skip
        try:
            for live in serves.values():
                if wait_until(partial(evaluated, live), EVALUATION_GUARD_S, every=1.0) is None:
                    raise RuntimeError(f"serve never evaluated:\n{live.output()[-2000:]}")
            print("  every serve has run its first evaluation cycle", flush=True)
            if args.profile is not None:  # py-spy over each serve process while it is timed
                for name, live in serves.items():
                    profilers[name] = subprocess.Popen(
                        [args.py_spy, "record", "--pid", str(live.proc.pid), "--rate", "100",
                         "--format", "raw", "--nonblocking", "--output",
                         f"{args.profile}.{name}"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    )  # fmt: skip
            try:
                return measure(serves, args)
            finally:
                for name, profiler in profilers.items():
                    profiler.send_signal(signal.SIGINT)
                    profiler.wait(timeout=120)
                    print(f"\n  profile of {name} (py-spy, collapsed stacks): "
                          f"{args.profile}.{name}")  # fmt: skip
                    top_frames(Path(f"{args.profile}.{name}"))
        except BaseException:
            for live in serves.values():
                print(live.output()[-3000:], file=sys.stderr)
            raise


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument("--url", help="a database seeded earlier (with --keep); skips seeding")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--rpm", type=int, default=30)
    parser.add_argument("--gpu-interval", type=int, default=60, help="seconds between samples")
    parser.add_argument("--slos", type=int, default=50)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=2, help="1-client passes per round")
    parser.add_argument("--workers", type=int, default=1, help="serve --workers")
    parser.add_argument(
        "--before-workers", type=int, default=None,
        help="the --before serve's --workers (default: --workers); with --before set to this "
        "checkout, compares worker counts in the same rounds",
    )  # fmt: skip
    parser.add_argument("--interval", type=float, default=30.0, help="evaluation interval, s")
    parser.add_argument(
        "--env", action="append", default=[], metavar="INFERSIGHT_NAME=VALUE",
        help="a setting of the serve (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--before-env", action="append", default=None, metavar="INFERSIGHT_NAME=VALUE",
        help="a setting of the --before serve (repeatable; default: --env's); with --before "
        "set to this checkout, compares settings in the same rounds",
    )  # fmt: skip
    parser.add_argument(
        "--ranges", type=lambda s: s.split(","), default=["default", "30d"],
        help="comma-separated ranges per page (default: the page's own)",
    )  # fmt: skip
    parser.add_argument(
        "--code", type=Path, help="a checkout whose code the serve runs (default: this one)"
    )
    parser.add_argument(
        "--before", type=Path,
        help="a checkout (git worktree) of the starting commit: its serve is timed in the same "
        "rounds (each serve on a copy of the store of its own)",
    )  # fmt: skip
    parser.add_argument(
        "--no-same-answers", dest="same_answers", action="store_false",
        help="with --before: skip rendering every page with both checkouts and comparing",
    )  # fmt: skip
    parser.add_argument("--profile", type=Path, help="py-spy each serve into PROFILE.NAME")
    parser.add_argument("--py-spy", default=str(Path(sys.executable).parent / "py-spy"))
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.days, args.rpm, args.gpu_interval, args.slos = 1, 2, 600, 6
        args.clients, args.rounds, args.passes, args.interval = 4, 1, 1, 2.0
        args.ranges = ["default"]
    for name in ("after", "before"):  # a malformed setting stops the run before it seeds
        _settings(name, args)
    now = datetime.now(UTC)
    drop, url = None, args.url
    if url is None:
        url, drop = seed(args, now)
    else:
        engine = create_store_engine(url)
        migrate.upgrade(engine)
        engine.dispose()
    results: dict[str, Any] = {}
    copies: list[Any] = []
    try:
        results = timed_serves(url, args, copies)
    finally:
        for drop_copy in copies:
            drop_copy()
        if drop is not None:
            if args.keep:
                print(f"  kept: {url}")
            else:
                drop()
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
