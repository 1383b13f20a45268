"""Restart benchmark (issue 14, defect 5): how soon a restarted sidecar acknowledges exports.

An OTLP exporter retries a refused export for a limited time (the OTLP/HTTP exporter of
opentelemetry-python: 10 s); a sidecar that takes longer to come back after a crash makes its
server drop spans. Prints, in one run on this machine:

1. references: the interpreter's own start (``python -c pass``) and the import of the store
   libraries (SQLAlchemy, the driver, the writer's math) that a sidecar now loads only after
   its receivers listen;
2. ``python -X importtime``: what the sidecar imports before it binds (total and the largest);
3. for ``--runs`` crash/restart cycles: ``kill -9`` of a running sidecar, then restart on the
   same spool, and the time from the restart to the first acknowledged export (an exporter
   retrying every 10 ms) and to that export's spans being in the store, the CPU seconds of
   the sidecar's process tree (decoders included) by the ack, and the ratio to the
   interpreter's start timed next to each cycle (before the restart in odd cycles, after it
   in even ones): every cycle, then the median and spread (min–max) of the ratios;
4. with ``--compare DIR``: the same cycles for the checkout in DIR (an older version), as the
   same-run reference for the change, the two checkouts' cycles alternating (ABBA).

The store is a temporary SQLite file by default (``--store URL`` for another, e.g.
PostgreSQL, migrated beforehand).
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from harness.interleave import interleave, ratio_spread
from harness.proctree import tree_cpu_seconds
from harness.results import write_json
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from sqlalchemy import func, select

from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.tables import requests

ROOT = Path(__file__).resolve().parents[1]

PROTOBUF = {"content-type": "application/x-protobuf"}
#: The OTLP/HTTP exporter's retry budget in opentelemetry-python, for context.
EXPORTER_BUDGET_S = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def export(n: int) -> bytes:
    """``n`` vLLM-shaped request spans that started two seconds ago, with random ids."""
    now = time.time_ns()
    attributes = [
        KeyValue(key="gen_ai.latency.time_to_first_token", value=AnyValue(double_value=0.2)),
        KeyValue(key="gen_ai.latency.e2e", value=AnyValue(double_value=1.0)),
        KeyValue(key="gen_ai.usage.prompt_tokens", value=AnyValue(int_value=100)),
        KeyValue(key="gen_ai.usage.completion_tokens", value=AnyValue(int_value=20)),
    ]
    spans = [
        Span(
            trace_id=os.urandom(16),
            span_id=os.urandom(8),
            name="llm_request",
            kind=Span.SPAN_KIND_SERVER,
            start_time_unix_nano=now - 2_000_000_000,
            end_time_unix_nano=now - 1_000_000_000,
            attributes=attributes,
        )
        for _ in range(n)
    ]
    resource = Resource(
        attributes=[KeyValue(key="service.name", value=AnyValue(string_value="vllm"))]
    )
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=spans)])]
    )
    return request.SerializeToString()


def timed(argv: list[str], env: dict[str, str], repeats: int) -> float:
    """Median wall seconds of a command."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def importtime(tree: Path) -> tuple[float, list[tuple[float, str]]]:
    """Seconds the sidecar's pre-bind imports take, and the five largest top-level ones."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = "import infersight.cli, infersight.cli.commands_sidecar"
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in result.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)", line)
        if match and len(match.group(2)) <= 1:  # top-level imports only
            rows.append((int(match.group(1)) / 1e6, match.group(3)))
    return sum(s for s, _ in rows), sorted(rows, reverse=True)[:5]


def sidecar(tree: Path, store: str, spool: Path, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "from infersight.cli import main; main()", "--store", store,
         "sidecar", "--otlp-http", f"127.0.0.1:{port}", "--otlp-grpc", "127.0.0.1:0",
         "--spool-dir", str(spool), "--gpu-source", "none", "--window", "0",
         "--instance", "restart"],
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=tree,  # ``python -c`` imports from the working directory first
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def stored(engine) -> int:  # type: ignore[no-untyped-def]
    with engine.connect() as c:
        return int(c.execute(select(func.count()).select_from(requests)).scalar_one())


def cycles(tree: Path, store: str, runs: int, spans: int, workdir: Path) -> dict[str, list[float]]:
    """``runs`` kill -9 / restart cycles; per cycle, seconds to the first ack and to stored,
    the CPU seconds of the sidecar's process tree by the ack, and the interpreter's start
    (``python -c pass``) next to it: timed while the sidecar runs, before its kill for odd
    cycles and after its spans are stored for even ones (ABBA around the restarts)."""
    engine = create_store_engine(store)
    spool = workdir / f"spool-{tree.name}-{time.monotonic_ns()}"
    port = free_port()
    out: dict[str, list[float]] = {"ack": [], "stored": [], "ack_cpu": [], "interpreter_s": []}
    interpreter: list[float] = []  # one per pass, timed before its kill
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = sidecar(tree, store, spool, port)
    try:
        with httpx.Client(timeout=5) as client:
            for run in range(runs + 1):
                body = export(spans)
                before = stored(engine)
                started = time.perf_counter()
                while True:
                    try:
                        if (
                            client.post(
                                f"http://127.0.0.1:{port}/v1/traces", content=body, headers=PROTOBUF
                            ).status_code
                            == 200
                        ):
                            break
                    except httpx.TransportError:
                        pass
                    time.sleep(0.01)  # fmt: skip
                acked = time.perf_counter() - started
                acked_cpu = tree_cpu_seconds(proc.pid)
                while stored(engine) < before + spans:
                    time.sleep(0.01)
                landed = time.perf_counter() - started
                interpreter.append(timed([sys.executable, "-c", "pass"], env, 1))
                if run:  # the first start is a cold one: not a restart
                    out["ack"].append(acked)
                    out["stored"].append(landed)
                    out["ack_cpu"].append(acked_cpu)
                    # Before this cycle's restart (odd), or after it (even).
                    out["interpreter_s"].append(interpreter[run - 1 if run % 2 else run])
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                proc = sidecar(tree, store, spool, port)
    finally:
        proc.kill()
        proc.wait()
        engine.dispose()
    return out


def report(name: str, figures: dict[str, list[float]]) -> None:
    ack, landed, cpu = figures["ack"], figures["stored"], figures["ack_cpu"]
    for r, (a, s, c, i) in enumerate(zip(ack, landed, cpu, figures["interpreter_s"], strict=True)):
        print(f"  cycle {r + 1}: ack {a:.3f} s, stored {s:.3f} s, CPU {c:.3f} s; "
              f"python -c pass {i:.3f} s ({a / i:.1f}×)")  # fmt: skip
    ratio = ratio_spread(ack, figures["interpreter_s"])
    print(
        f"{name}: restart → first acknowledged export median {statistics.median(ack):.3f} s "
        f"(max {max(ack):.3f} s; {ratio.text('×', '.1f')} the interpreter's start, each "
        f"cycle's; exporter budget {EXPORTER_BUDGET_S:g} s), the sidecar tree's CPU by then "
        f"{statistics.median(cpu):.3f} s; → stored median {statistics.median(landed):.3f} s "
        f"(max {max(landed):.3f} s)"
    )


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--spans", type=int, default=512)
    parser.add_argument("--store", default=None, help="a migrated store URL (default: SQLite)")
    parser.add_argument("--compare", type=Path, default=None, help="another checkout to time")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        store = args.store or f"sqlite:///{workdir / 'store.db'}"
        if args.store is None:
            migrate.upgrade(create_store_engine(store))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        interpreter = timed([sys.executable, "-c", "pass"], env, 5)
        libraries = timed(
            [
                sys.executable,
                "-c",
                "import infersight.storage.writer, infersight.storage.engine, psycopg",
            ],
            env,
            3,
        )
        print(f"reference: python -c pass {interpreter:.3f} s (median of 5)")
        print(f"reference: importing the store libraries {libraries:.3f} s (loaded after bind)")
        total, largest = importtime(ROOT)
        print(f"python -X importtime, before the sidecar binds: {total:.3f} s; largest: "
              + ", ".join(f"{name} {s:.3f} s" for s, name in largest))  # fmt: skip
        if args.compare is None:
            figures = cycles(ROOT, store, args.runs, args.spans, workdir)
            report("this tree", figures)
        else:
            old_total, old_largest = importtime(args.compare.resolve())
            print(f"compare {args.compare}: importtime before bind {old_total:.3f} s; largest: "
                  + ", ".join(f"{name} {s:.3f} s" for s, name in old_largest))  # fmt: skip
            # The two checkouts' cycles interleaved, one at a time in ABBA order (each a cold
            # start, then the restart timed), so that the load falls on both alike.
            trees = {"this": ROOT, "compare": args.compare.resolve()}
            runs = interleave(
                {k: functools.partial(cycles, t, store, 1, args.spans, workdir)
                 for k, t in trees.items()},
                args.runs,
            )  # fmt: skip
            figures, old = (
                {key: [r[key][0] for r in runs[k]] for key in runs[k][0]} for k in trees
            )
            report("this tree", figures)
            report(f"compare {args.compare}", old)
            ratio = ratio_spread(old["ack"], figures["ack"])
            cpu = ratio_spread(old["ack_cpu"], figures["ack_cpu"])
            print(f"restart → first ack: {args.compare} takes {ratio.text()} this tree's wall "
                  f"time and {cpu.text()} its CPU time, each round's")  # fmt: skip
            results["compare"] = old
        results.update(interpreter=interpreter, libraries=libraries, imports=total, **figures)
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
