"""Hostile-input benchmark (issue 14): what each class of hostile OTLP body costs a live sidecar.

Starts ``infersight sidecar`` on loopback ports (SQLite store, no GPU), measures an idle
reference in the same run (``/healthz`` latency and RSS at rest), then sends each input class
once and prints: the answer (HTTP status or gRPC code), the body's size as sent and inflated,
the sidecar's CPU seconds for it (utime + stime of all its threads, from ``/proc``), CPU per
compressed MB, the sidecar's peak RSS while it was processed (``VmHWM``, reset before each
input through ``/proc/PID/clear_refs``), and the worst ``/healthz`` latency of a prober that
runs concurrently, every 10 ms, for as long as the input is under way.

The sidecar decodes in child processes (``collector.decoding``): CPU is that of the sidecar,
its live descendants and its exited children; RSS (idle and peak) is the sum over the
sidecar and its live descendants, peaks summed as if simultaneous (an upper bound).

Targets (issue 14): no request costs more than a small constant × its compressed size in
CPU, RSS never above ~2× idle plus the body limit, ``/healthz`` always under 100 ms. Legit
exports (512 and 10,000 vLLM spans) are measured alongside as the reference for CPU per MB.

``--quick`` runs every class at small sizes (the smoke test in the suite runs it).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
from bench_collector import export
from harness.proctree import rss_mb
from harness.results import write_json
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from infersight.storage import migrate
from infersight.storage.engine import create_store_engine

ROOT = Path(__file__).resolve().parents[1]
PROTOBUF = {"content-type": "application/x-protobuf"}
JSON_MEDIA = {"content-type": "application/json"}
GZIP = {"content-encoding": "gzip"}
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
BODY_LIMIT = 20 * 1024 * 1024
QUICK_BODY_LIMIT = 4 * 1024 * 1024
MB = 1e6


@dataclass
class Sidecar:
    proc: subprocess.Popen[str]
    http: str
    grpc: str

    @property
    def pid(self) -> int:
        return self.proc.pid


@contextmanager
def sidecar(tmp: str, body_limit: int) -> Iterator[Sidecar]:
    store = f"sqlite:///{tmp}/store.db"
    migrate.upgrade(create_store_engine(store))
    command = [
        sys.executable, "-c", "from infersight.cli.commands_sidecar import sidecar; sidecar()",
        "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "127.0.0.1:0", "--instance", "hostile",
        "--store", store, "--spool-dir", f"{tmp}/spool", "--gpu-source", "none",
        "--window", "0", "--max-body-bytes", str(body_limit),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    assert proc.stdout is not None
    http = grpc_port = None
    for line in proc.stdout:  # the ready line names both ports
        http = http or re.search(r"http=127\.0\.0\.1:(\d+)", line)
        grpc_port = grpc_port or re.search(r"grpc=127\.0\.0\.1:(\d+)", line)
        if http and grpc_port:
            break
    if not (http and grpc_port):
        proc.kill()
        raise SystemExit("the sidecar did not start")
    drain = threading.Thread(target=proc.stdout.read, daemon=True)  # keep the pipe drained
    drain.start()
    try:
        yield Sidecar(proc, f"http://127.0.0.1:{http.group(1)}", f"127.0.0.1:{grpc_port.group(1)}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        drain.join(timeout=10)
        proc.stdout.close()


def family(pid: int) -> list[int]:
    """The sidecar and its live descendants (its decoder processes)."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                todo.extend(int(child) for child in task.read_text().split())
            except OSError:
                continue  # the thread ended
    return out


def _status_kb(pid: int, name: str) -> int:
    try:
        match = re.search(rf"{name}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    except OSError:
        return 0  # it exited meanwhile
    return int(match.group(1)) if match else 0


def family_cpu_s(pid: int) -> float:
    """CPU seconds of the sidecar's threads, its children that have exited (and been
    waited for: ``cutime`` + ``cstime``) and its live descendants."""
    total = 0.0
    for member in family(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks = int(fields[11]) + int(fields[12])
        if member == pid:
            ticks += int(fields[13]) + int(fields[14])
        total += ticks / os.sysconf("SC_CLK_TCK")
    return total


def family_rss_mb(pid: int) -> float:
    """RSS of the sidecar and its live descendants, summed (pages they share are counted
    once per process: an upper bound)."""
    return sum(_status_kb(member, "VmRSS") for member in family(pid)) / 1024


def reset_peak(pid: int) -> bool:
    try:
        for member in family(pid):
            Path(f"/proc/{member}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_rss_mb(pid: int) -> float:
    """The sum of each member's peak since ``reset_peak`` (peaks at different moments
    summed: an upper bound)."""
    return sum(_status_kb(member, "VmHWM") for member in family(pid)) / 1024


#: The prober process (standard library only, so it starts at once): GET /healthz every
#: ``argv[2]`` seconds until stdin closes, then print the latencies and failures as JSON. It
#: runs apart from this process so that the senders' threads do not delay it on our GIL.
PROBE = """
import http.client, json, sys, threading, time
from urllib.parse import urlsplit
url, every = urlsplit(sys.argv[1]), float(sys.argv[2])
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
latencies, failures = [], 0
while not stop.is_set():
    started = time.perf_counter()
    try:
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        response.read()
        failures += response.status != 200
    except (OSError, http.client.HTTPException):
        failures += 1
        connection.close()
    latencies.append(time.perf_counter() - started)
    if len(latencies) == 1:
        print("ready", flush=True)
    stop.wait(every)
print(json.dumps({"latencies": latencies, "failures": failures}), flush=True)
"""


@dataclass
class Prober:
    """/healthz probed from a separate process; RSS sampled here, for as long as it runs."""

    url: str
    pid: int
    every_s: float = 0.01
    latencies: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)
    failures: int = 0

    @contextmanager
    def running(self) -> Iterator[Prober]:
        command = [sys.executable, "-c", PROBE, self.url, str(self.every_s)]
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert proc.stdin is not None
        assert proc.stdout is not None
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(self.every_s):
                self.rss.append(family_rss_mb(self.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        try:
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit("the /healthz prober did not start")
            self.rss.append(family_rss_mb(self.pid))
            sampler.start()
            yield self
        finally:
            stop.set()
            proc.stdin.close()
            result = json.loads(proc.stdout.read() or "{}")
            proc.stdout.close()
            proc.wait(timeout=30)
            if sampler.is_alive():
                sampler.join()
            self.latencies = result.get("latencies", [])
            self.failures = result.get("failures", 0)


@dataclass(frozen=True)
class Case:
    name: str
    transport: str  # "http" or "grpc"
    body: bytes
    headers: dict[str, str]
    inflated: int
    concurrent: int = 1


def send(side: Sidecar, case: Case) -> str:
    if case.transport == "grpc":
        with grpc.insecure_channel(
            side.grpc, options=[("grpc.max_send_message_length", 64 << 20)]
        ) as channel:
            try:
                channel.unary_unary(EXPORT)(case.body, timeout=300)
            except grpc.RpcError as exc:
                return str(exc.code().name)
            return "OK"
    try:
        response = httpx.post(
            side.http + "/v1/traces", content=case.body, headers=case.headers, timeout=300
        )
    except httpx.HTTPError as exc:
        # A body refused before it is read (a declared length over the limit) is answered
        # while the client is still sending; the server then closes, and a client that
        # keeps writing may see a reset before it reads the answer. Ask again as curl does:
        # watch for the answer between chunks and stop sending once it is there.
        early = _answer_while_sending(side.http, case)
        return early if early is not None else type(exc).__name__
    answer = str(response.status_code)
    if (
        response.status_code == 200
        and case.headers.get("content-type") == JSON_MEDIA["content-type"]
    ):
        rejected = response.json().get("partialSuccess", {}).get("rejectedSpans")
        answer += f" rejected={rejected}" if rejected else ""
    elif response.status_code == 200:
        rejected = ExportTraceServiceResponse.FromString(response.content).partial_success
        answer += f" rejected={rejected.rejected_spans}" if rejected.rejected_spans else ""
    return answer


def _answer_while_sending(base: str, case: Case) -> str | None:
    """POST ``case`` over a raw socket, reading the status as soon as the server answers."""
    url = httpx.URL(base)
    host, port = url.host, url.port or 80
    head = f"POST /v1/traces HTTP/1.1\r\nHost: {host}:{port}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in case.headers.items())
    head += f"Content-Length: {len(case.body)}\r\nConnection: close\r\n\r\n"
    view = memoryview(case.body)
    try:
        with socket.create_connection((host, port), timeout=300) as sock:
            try:
                sock.sendall(head.encode("ascii"))
                for offset in range(0, len(view), 1 << 16):
                    if select.select([sock], [], [], 0.001)[0]:
                        break
                    sock.sendall(view[offset : offset + (1 << 16)])
            except OSError:
                pass  # the server stopped reading: its answer may be waiting all the same
            status = sock.recv(64).split(b" ")
    except OSError:
        return None
    return status[1].decode("ascii") if len(status) > 1 else None


@dataclass(frozen=True)
class Row:
    case: Case
    answers: str
    rss_before_mb: float
    cpu_s: float
    peak_rss_mb: float
    healthz_max_ms: float
    healthz_failures: int

    def figures(self) -> dict[str, object]:
        """The row for ``--json``: the input by its name (not its body)."""
        return {
            "case": self.case.name,
            "answers": self.answers,
            "rss_before_mb": self.rss_before_mb,
            "cpu_s": self.cpu_s,
            "peak_rss_mb": self.peak_rss_mb,
            "healthz_max_ms": self.healthz_max_ms,
            "healthz_failures": self.healthz_failures,
        }


def settle(pid: int, idle_rss: float, timeout: float) -> float:
    """Wait (at most ``timeout``) for the RSS to come back near idle: the sidecar hands
    freed heap back to the OS every 10 s, so each input starts from about the same place."""
    deadline = time.monotonic() + timeout
    while family_rss_mb(pid) > 1.15 * idle_rss and time.monotonic() < deadline:
        time.sleep(0.5)
    return family_rss_mb(pid)


def measure(side: Sidecar, case: Case, rss_before: float) -> Row:
    exact_peak = reset_peak(side.pid)
    cpu0 = family_cpu_s(side.pid)
    prober = Prober(side.http, side.pid)  # it has had one answer before the input is sent
    with prober.running(), ThreadPoolExecutor(case.concurrent) as pool:
        answers = list(pool.map(lambda _: send(side, case), range(case.concurrent)))
    cpu = family_cpu_s(side.pid) - cpu0
    # A decoder that retired during the input took its peak with it: the sampled sum
    # covers it.
    peak = max(peak_rss_mb(side.pid), *prober.rss) if exact_peak else max(prober.rss)
    tally = {a: answers.count(a) for a in sorted(set(answers))}
    text = ", ".join(a if n == 1 else f"{n}× {a}" for a, n in tally.items())
    return Row(case, text, rss_before, cpu, peak, max(prober.latencies) * 1000, prober.failures)


def idle_reference(side: Sidecar, seconds: float) -> tuple[float, float]:
    """Worst /healthz latency and RSS at rest (the sidecar's and its decoder processes')."""
    time.sleep(0.5)
    with Prober(side.http, side.pid).running() as prober:
        time.sleep(seconds)
    return max(prober.latencies) * 1000, family_rss_mb(side.pid)


def wait_for_decoders(side: Sidecar, timeout: float = 60.0) -> int:
    """The sidecar starts its decoder processes in the background: wait for them (and for
    each to finish importing, seen as its RSS settling) so the idle reference counts them."""
    deadline = time.monotonic() + timeout
    while len(family(side.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    last = -1.0
    while time.monotonic() < deadline and (now := family_rss_mb(side.pid)) != last:
        last = now
        time.sleep(0.5)
    return len(family(side.pid)) - 1


def gz(body: bytes) -> bytes:
    return gzip.compress(body, compresslevel=6)


def json_spans(count: int, attributes: int) -> bytes:
    span: dict[str, list[dict[str, str]]] = {"attributes": [{"key": "a"}] * attributes}
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [span] * count}]}]}
    return json.dumps(document, separators=(",", ":")).encode()


def cases(quick: bool, body_limit: int) -> list[tuple[str, Callable[[], Case]]]:
    """Each case is built just before it is sent (the big ones are tens of MB)."""
    big = body_limit - body_limit // 20  # just under the limit
    now = time.time_ns()
    far = int(time.mktime((2150, 1, 1, 0, 0, 0, 0, 0, 0)) * 1e9)
    legit_small, _ = export(512, now)
    members = gzip.compress(b"") * (20_000 if quick else 160_000)

    def http(name: str, body: bytes, headers: dict[str, str], inflated: int = 0) -> Case:
        return Case(name, "http", body, headers, inflated or len(body))

    def dense(size: int) -> bytes:
        return b"\x0a\x00" * (size // 2)

    def json_dense(size: int) -> bytes:
        return b'{"resourceSpans":[' + b"{}," * (size // 3) + b"{}]}"

    bomb_size = (4 if quick else 16) << 20
    bomb_member = gzip.compress(bytes(bomb_size), compresslevel=9)
    nested = b"[" * 100_000
    out: list[tuple[str, Callable[[], Case]]] = [
        ("legit 512 spans", lambda: http("legit 512 spans (protobuf)", legit_small, PROTOBUF)),
        ("legit 512 gzip", lambda: http("legit 512 spans (gzip)", gz(legit_small),
                                        {**PROTOBUF, **GZIP}, len(legit_small))),
        ("gzip members", lambda: http(f"gzip: {len(members) // 20:,} empty members", members,
                                      {**PROTOBUF, **GZIP}, 0)),
        ("gzip bomb", lambda: http("gzip bomb (64 members of zeros)", bomb_member * 64,
                                   {**PROTOBUF, **GZIP}, 64 * bomb_size)),
        ("dense protobuf", lambda: http("HTTP protobuf: empty ResourceSpans", dense(big),
                                        PROTOBUF)),
        ("dense protobuf 2MB", lambda: http("HTTP protobuf: 2 MB empty ResourceSpans",
                                            dense(2_000_000), PROTOBUF)),
        ("dense gzip", lambda: http("HTTP protobuf gzip: empty ResourceSpans", gz(dense(big)),
                                    {**PROTOBUF, **GZIP}, big)),
        ("dense json", lambda: http("OTLP/JSON: empty resourceSpans", json_dense(big),
                                    JSON_MEDIA)),
        ("dense json 3MB", lambda: http("OTLP/JSON: 3 MB empty resourceSpans",
                                        json_dense(3_000_000), JSON_MEDIA)),
        ("json bounded worst", lambda: http("OTLP/JSON: worst accepted (128 keyed attrs/span)",
                                            json_spans(500 if quick else 2_300, 128), JSON_MEDIA)),
        ("dense grpc", lambda: Case("gRPC: empty ResourceSpans", "grpc", dense(big), {}, big)),
        ("dense grpc 1MB", lambda: Case("gRPC: 1 MB empty ResourceSpans", "grpc",
                                        dense(1_000_000), {}, 1_000_000)),
        ("nesting", lambda: http("OTLP/JSON: '[' × 100,000", nested, JSON_MEDIA)),
        ("oversize", lambda: http("oversize: limit + 1 MiB", bytes(body_limit + (1 << 20)),
                                  PROTOBUF)),
        ("far timestamps", lambda: http("512 spans starting in 2150", export(512, far)[0],
                                        PROTOBUF)),
        ("burst", lambda: Case("8 concurrent × empty ResourceSpans", "http", dense(big),
                               PROTOBUF, big, concurrent=8)),
    ]  # fmt: skip
    if not quick:
        legit_big, _ = export(10_000, now)
        out.insert(2, ("legit 10k", lambda: http("legit 10,000 spans (protobuf)", legit_big,
                                                 PROTOBUF)))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (the smoke test)")
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    body_limit = QUICK_BODY_LIMIT if args.quick else BODY_LIMIT
    with tempfile.TemporaryDirectory() as tmp, sidecar(tmp, body_limit) as side:
        print(f"sidecar pid {side.pid}: {side.http} (HTTP), {side.grpc} (gRPC)", flush=True)
        print("warm-up:", send(side, Case("warm-up", "http", export(10, time.time_ns())[0],
                                          PROTOBUF, 0)), flush=True)  # fmt: skip
        decoders = wait_for_decoders(side)
        idle_ms, idle_rss = idle_reference(side, 1.0 if args.quick else args.idle_seconds)
        print(f"reference (idle): /healthz max {idle_ms:.1f} ms, RSS {idle_rss:.1f} MB "
              f"(sidecar {rss_mb(side.pid):.1f} MB + {decoders} decoder process(es))",
              flush=True)  # fmt: skip
        labels = cases(args.quick, body_limit)
        for label, build in labels:
            before = settle(side.pid, idle_rss, 3.0 if args.quick else 15.0)
            case = build()
            print(
                f"… {label}: {len(case.body) / MB:.2f} MB, RSS before {before:.0f} MB", flush=True
            )
            rows.append(measure(side, case, before))
            del case
            print_row(rows[-1], idle_rss)
        alive = side.proc.poll() is None
    print_table(rows, idle_ms, idle_rss, body_limit)
    results = {
        "idle_healthz_ms": idle_ms,
        "idle_rss_mb": idle_rss,
        "alive": alive,
        "answers": {label: row.answers for (label, _), row in zip(labels, rows, strict=True)},
        "rows": rows,
    }
    write_json(args.json, {**results, "rows": [row.figures() for row in rows]})
    return results


def print_row(row: Row, idle_rss: float) -> None:
    size = len(row.case.body) / MB
    per_mb = row.cpu_s / size if size else 0.0
    print(
        f"    {row.answers}; CPU {row.cpu_s:.3f} s ({per_mb:.3f} s/MB sent); peak RSS "
        f"{row.peak_rss_mb:.0f} MB ({row.peak_rss_mb / idle_rss:.2f}× idle); /healthz max "
        f"{row.healthz_max_ms:.1f} ms, {row.healthz_failures} failed",
        flush=True,
    )


def print_table(rows: list[Row], idle_ms: float, idle_rss: float, body_limit: int) -> None:
    limit = 2 * idle_rss + body_limit / 2**20
    print(f"\nreference (idle): /healthz max {idle_ms:.1f} ms, RSS {idle_rss:.1f} MB; "
          f"RSS target 2 × idle + body limit = {limit:.0f} MB")  # fmt: skip
    head = ("input", "answer", "sent MB", "inflated MB", "CPU s", "CPU s/MB sent",
            "RSS before MB", "peak RSS MB", "peak/target", "healthz max ms")  # fmt: skip
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        sent = len(row.case.body) * row.case.concurrent / MB
        inflated = (row.case.inflated or len(row.case.body)) * row.case.concurrent / MB
        cells = (
            row.case.name, row.answers, f"{sent:.2f}", f"{inflated:.2f}", f"{row.cpu_s:.3f}",
            f"{row.cpu_s / sent:.3f}", f"{row.rss_before_mb:.0f}", f"{row.peak_rss_mb:.0f}",
            f"{row.peak_rss_mb / limit:.2f}", f"{row.healthz_max_ms:.1f}",
        )  # fmt: skip
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
