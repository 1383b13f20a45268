"""Every client tool against one simulator, side by side, with what the sidecar stored.

One run, one server: the simulator's OpenAI-compatible endpoint (Llama 3.1 8B on one H200,
``llama-3.1-8b-h200x1``) in a subprocess, exporting each request's vLLM ``llm_request`` span
over OTLP to a real ``infersight sidecar``, which stores it in a throwaway store (a SQLite
file, or ``--store URL``). Then, one after the other and at matched settings (``--concurrency``
closed-loop users, ``--seconds``, ``--input`` prompt and exactly ``--output`` output tokens,
streaming chat completions):

- **AIPerf** (``aiperf profile --concurrency``), imported with ``infersight baseline import``
  (its ``profile_export_aiperf.json`` and the per-request ``profile_export.jsonl``);
- **GuideLLM** (``guidellm run --profile kind=concurrent``), imported the same way;
- **``infersight loadtest``** with the asyncio engine, and with ``--engine locust`` and one and
  two workers, each stored as a run (its requests carry a ``traceparent``).

Per client: TTFT / TPOT / E2E p50 and p99 and req/s as the client reports them (every request
of the run, no warm-up left out: the tools count them all); the server-side values the sidecar
stored for the client's own time window (``storage.baselines.capture_window``: the store's read
API; mean prompt tokens too, which shows what each client's prompts weighed on the server);
and the client ↔ engine gap infersight computed (``storage.client_reads.read_pairs``, joined
by trace id: only load-test runs propagate their trace context, AIPerf's and GuideLLM's
requests are "not joined"). The reference is the asyncio engine in the same run, run first and
again last by default (``--clients`` names it twice), so that it brackets the other clients:
every p50 is also printed as a ratio to it, against each of its runs (median, and min–max when
it ran twice). Absolute times are context only (the host's load shows in them).

A tool that is not installed under ``--tools-path`` gets a "not installed" row (an error with
``--require-tools``). The tools are installed outside the project's environment (they pin
other versions of click and rich), with one small local tokenizer for both (no network: AIPerf
and GuideLLM both need a tokenizer to make prompts of a given length; ``make_tokenizer`` says
how it is sized to the simulator's ~4 characters a token). AIPerf counts output tokens from the
server's ``usage`` (``--use-server-token-count``; the simulator sends it in the final chunk when
``stream_options.include_usage`` is set): its own tokenizer would count the simulator's
`` w12`` words as several tokens each and divide its TPOT by the wrong count. Commands to rerun::

    /work/main/.venv/bin/pip install --target /tmp/h18-tools 'aiperf==0.13.*' guidellm==0.8.1
    PYTHONPATH=/tmp/h18-tools .venv/bin/python bench/bench_clients.py --make-tokenizer /tmp/h18-tok
    .venv/bin/python bench/bench_clients.py --tools-path /tmp/h18-tools \\
        --tokenizer /tmp/h18-tok [--concurrency 8] [--seconds 30] [--input 256] [--output 64] \\
        [--clients aiperf,guidellm,asyncio,locust1,locust2] [--json figures.json]

(``HF_HUB_OFFLINE`` must not be set for AIPerf: with it, AIPerf takes a tokenizer path for a
hub repository id and refuses it; the bench drops it from the tools' environment.) ``--quick``
runs only the built-in engines, briefly (``tests/loadgen/test_bench_clients_smoke.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from harness.interleave import spread
from harness.results import write_json
from sqlalchemy import func, select

from infersight.core.baseline import Baseline
from infersight.core.errors import InvalidInput
from infersight.core.gap import gap_report
from infersight.core.loadtest import LoadTestRun, to_baseline
from infersight.core.model_names import ModelAliases
from infersight.core.query import Selector
from infersight.core.window import Window
from infersight.storage import migrate
from infersight.storage.baselines import capture_window, get_baseline
from infersight.storage.client_reads import read_pairs
from infersight.storage.engine import create_store_engine
from infersight.storage.runs import get_run
from infersight.storage.tables import requests

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = ("aiperf", "guidellm", "asyncio", "locust1", "locust2")
INFERSIGHT = [sys.executable, "-c", "from infersight.cli import main; main()"]
SEED = 18


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(port: int, otlp: str) -> None:
    """The simulator's server, its spans exported to the sidecar (runs in a subprocess)."""
    import uvicorn

    from infersight.simulator.realtime import RealtimeServer
    from infersight.simulator.sinks.otlp import OtlpSink
    from infersight.simulator.specs import load_profile

    sink = OtlpSink(otlp, flush_on_write=False)
    profile = load_profile("llama-3.1-8b-h200x1")
    server = RealtimeServer.standalone("bench-0", profile, epoch=datetime.now(UTC), sinks=[sink])
    uvicorn.run(server.app(), host="127.0.0.1", port=port, log_level="warning", ws="none")


def _wait_http(url: str, what: str, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{what} exited {process.returncode} before it answered")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{what} did not answer {url} in {timeout_s:g} s")


@contextmanager
def _process(argv: list[str], what: str, url: str, log: Path) -> Iterator[None]:
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=_own_env(), stdout=out, stderr=subprocess.STDOUT
        )
    try:
        _wait_http(url, what, process, 120.0)
        yield
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _own_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _tool_env(tools: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    return {**env, "PYTHONPATH": str(tools), "NO_COLOR": "1", "TERM": "dumb"}


@dataclasses.dataclass
class Row:
    """One client's figures; ``status`` is "ok" or why the row has none."""

    client: str
    status: str = "ok"
    window: tuple[datetime, datetime] | None = None
    client_figures: dict[str, Any] = dataclasses.field(default_factory=dict)
    server: dict[str, Any] = dataclasses.field(default_factory=dict)
    gap: dict[str, Any] = dataclasses.field(default_factory=dict)
    command: list[str] = dataclasses.field(default_factory=list)
    own_window: tuple[datetime, datetime] | None = None


def _run_window(run: LoadTestRun) -> tuple[datetime, datetime] | None:
    """A load-test run's own requests, from its first send to its last answer: the server
    values are read over this, not over the process's lifetime (Locust's start-up, its
    drain and stop would stretch the window and lower the server's req/s)."""
    if not run.results:
        return None
    first = min(r.sent_s for r in run.results)
    last = max(r.done_s for r in run.results)
    slack = 0.5  # the simulator's clock is its start time plus a monotonic offset: a few ms off
    return (
        run.started_at + timedelta(seconds=first - slack),
        run.started_at + timedelta(seconds=last + slack),
    )


def _figures(b: Baseline) -> dict[str, Any]:
    out: dict[str, Any] = {
        "requests": b.requests,
        "errors": b.errors,
        "rps": b.request_throughput,
        "duration_s": b.duration_s,
    }
    for metric in ("ttft", "tpot", "e2e"):
        summary = b.latency.get(metric)
        for q, key in ((0.5, "p50"), (0.99, "p99")):
            out[f"{metric}_{key}"] = None if summary is None else summary.quantiles.get(q)
    ok = b.requests - b.errors
    out["mean_input_tokens"] = b.input_tokens / ok if b.input_tokens and ok else None
    out["mean_output_tokens"] = b.output_tokens / ok if b.output_tokens and ok else None
    return out


def _run(argv: list[str], env: dict[str, str], log: Path, cwd: Path = ROOT) -> str:
    """Run a client to completion; its stdout (everything is logged to ``log``)."""
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    log.write_text(f"$ {' '.join(argv)}\n{done.stdout}\n--- stderr\n{done.stderr}")
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise RuntimeError(f"{argv[0]} … exited {done.returncode} (log {log}):\n{tail}")
    return done.stdout


class Bench:
    def __init__(self, args: argparse.Namespace, store: str, work: Path) -> None:
        self.args, self.store, self.work = args, store, work
        self.url = ""
        self.model = ""
        self.engine = create_store_engine(store)

    # -- the clients ----------------------------------------------------------------------

    def drive(self, row: Row) -> None:
        if row.client == "aiperf":
            self.aiperf(row)
        elif row.client == "guidellm":
            self.guidellm(row)
        elif row.client == "asyncio":
            self.loadtest(row, None)
        else:
            self.loadtest(row, int(row.client.removeprefix("locust")))

    def loadtest(self, row: Row, workers: int | None) -> None:
        a = self.args
        argv = [*INFERSIGHT, "--store", self.store, "loadtest", self.url, "--model", self.model,
                "--concurrency", str(a.concurrency), "--duration", str(a.seconds),
                "--input-tokens", f"fixed:{a.input}", "--output-tokens", f"fixed:{a.output}",
                "--seed", str(SEED), "--name", row.client, "--json", "--quiet"]  # fmt: skip
        if workers is not None:
            argv += ["--engine", "locust", "--workers", str(workers)]
        row.command = argv[3:]
        out = _run(argv, _own_env(), self.work / f"{row.client}.log")
        run = get_run(self.engine, int(json.loads(out)["run"]))
        # Every request, as the other tools count them (the CLI's summary leaves out a warm-up).
        row.client_figures = _figures(to_baseline(run, row.client, datetime.now(UTC)))
        row.client_figures["run"] = run.id
        row.own_window = _run_window(run)

    def aiperf(self, row: Row) -> None:
        a, out = self.args, self.work / "aiperf"
        argv = [sys.executable, "-m", "aiperf", "profile", "--model", self.model,
                "--url", self.url, "--endpoint-type", "chat", "--streaming",
                "--tokenizer", str(a.tokenizer), "--concurrency", str(a.concurrency),
                "--benchmark-duration", str(a.seconds),
                "--prompt-input-tokens-mean", str(a.input), "--prompt-input-tokens-stddev", "0",
                "--prompt-output-tokens-mean", str(a.output),
                "--prompt-output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true",
                "--use-server-token-count",
                "--random-seed", str(SEED), "--ui-type", "none", "--no-auto-plot",
                "--artifact-dir", str(out)]  # fmt: skip
        row.command = ["aiperf", *argv[3:]]
        _run(argv, _tool_env(a.tools_path), self.work / "aiperf.log")
        export = next(out.rglob("profile_export_aiperf.json"))
        records = next(out.rglob("profile_export.jsonl"))
        self._import(row, export, "--samples", str(records))

    def guidellm(self, row: Row) -> None:
        a, out = self.args, self.work / "guidellm"
        out.mkdir(exist_ok=True)
        report = out / "benchmarks.json"
        argv = [str(a.tools_path / "bin" / "guidellm"), "run",
                "--backend", f"kind=openai_http,target={self.url},model={self.model},"
                "request_format=/v1/chat/completions",
                "--profile", f"kind=concurrent,streams={a.concurrency}",
                "--constraint", f"kind=max_duration,seconds={a.seconds}",
                "--tokenizer", f"kind=huggingface_auto,model={a.tokenizer}",
                "--data", f"kind=synthetic_text,prompt_tokens={a.input},output_tokens={a.output}",
                "--seed", f"kind=static,value={SEED}",
                "--output", f"kind=json,path={report}"]  # fmt: skip
        row.command = ["guidellm", *argv[1:]]
        # The entry script's shebang is the interpreter pip ran under: run it with ours.
        _run([sys.executable, *argv], _tool_env(a.tools_path), self.work / "guidellm.log", out)
        self._import(row, report)

    def _import(self, row: Row, file: Path, *more: str) -> None:
        argv = [*INFERSIGHT, "--store", self.store, "baseline", "import", str(file),
                "--name", row.client, *more]  # fmt: skip
        _run(argv, _own_env(), self.work / f"{row.client}-import.log")
        row.client_figures = _figures(get_baseline(self.engine, row.client))

    # -- what the store holds ---------------------------------------------------------------

    def stored(self) -> int:
        with self.engine.connect() as c:
            return int(c.execute(select(func.count()).select_from(requests)).scalar_one())

    def settle(self, at_least: int) -> int:
        """Wait until the sidecar has stored what was sent (the simulator's exporter batches
        every 5 s): the count reaches ``at_least`` and then holds still for 7 s."""
        deadline = time.monotonic() + 180
        last, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            now = self.stored()
            if now != last:
                last, since = now, time.monotonic()
            elif now >= at_least and time.monotonic() - since > 7:
                return now
            time.sleep(0.5)
        return last

    def server_side(self, row: Row) -> None:
        assert row.window is not None
        window = Window(*row.window)
        try:
            b = capture_window(self.engine, "server", window, Selector(), datetime.now(UTC))
        except InvalidInput as exc:  # nothing stored in the window: the row says so
            row.server = {"error": str(exc)}
            return
        row.server = _figures(b)
        row.server["rps"] = self._served_rate(window)

    def _served_rate(self, window: Window) -> float | None:
        """Requests per second on the server's own clock: the window's stored requests over
        the time from the first one's arrival to the last one's end (the client's window also
        holds its start-up, which would dilute a rate over the whole window)."""
        r = requests.c
        query = select(r.start, r.e2e_s).where(r.start >= window.start, r.start < window.end)
        with self.engine.connect() as c:
            rows = c.execute(query).all()
        if len(rows) < 2:
            return None
        first = min(start for start, _ in rows)
        last = max(start + timedelta(seconds=e2e or 0.0) for start, e2e in rows)
        span = (last - first).total_seconds()
        return len(rows) / span if span > 0 else None

    def gap(self, row: Row) -> None:
        run_id = row.client_figures.get("run")
        if run_id is None:
            row.gap = {"joined": None, "note": "not joined (the tool sends no traceparent)"}
            return
        assert row.window is not None
        end = row.window[1] + timedelta(seconds=1)
        pairs = read_pairs(self.engine, Window(row.window[0], end), ModelAliases())
        mine = [p for p in pairs.pairs if p.client.span_id.startswith(f"loadtest-{run_id}-")]
        groups = gap_report(mine, ModelAliases(), (0.5, 0.99))
        calls = sum(g.calls for g in groups)
        joined = sum(g.joined for g in groups)
        row.gap = {"calls": calls, "joined": joined}
        if len(groups) == 1:
            (g,) = groups
            for name, dist in (("ttft_gap", g.ttft_gap), ("e2e_gap", g.e2e_gap)):
                row.gap[f"{name}_p50"] = dist.quantiles.get(0.5)
                row.gap[f"{name}_p99"] = dist.quantiles.get(0.99)


def _installed(tools: Path, client: str) -> bool:
    if client == "aiperf":
        return (tools / "aiperf").is_dir()
    if client == "guidellm":
        return (tools / "bin" / "guidellm").is_file()
    return True


def run_all(args: argparse.Namespace) -> list[Row]:
    rows = [Row(c) for c in args.clients.split(",")]
    for row in rows:
        if not _installed(args.tools_path, row.client):
            if args.require_tools:
                raise SystemExit(f"{row.client} is not installed in {args.tools_path}")
            row.status = f"not installed (in {args.tools_path})"
    work = Path(tempfile.mkdtemp(prefix="bench-clients-"))
    store = args.store or f"sqlite:///{work / 'store.db'}"
    bench = Bench(args, store, work)
    migrate.upgrade(bench.engine)
    otlp_port, sim_port = _free_port(), _free_port()
    sidecar = [*INFERSIGHT, "--store", store, "sidecar", "--otlp-http", f"127.0.0.1:{otlp_port}",
               "--otlp-grpc", "127.0.0.1:0", "--spool-dir", str(work / "spool"),
               "--gpu-source", "none", "--window", "0", "--instance", "bench-0"]  # fmt: skip
    simulator = [sys.executable, __file__, "--serve", str(sim_port), "--otlp",
                 f"http://127.0.0.1:{otlp_port}/v1/traces"]  # fmt: skip
    try:
        with (
            _process(sidecar, "the sidecar", f"http://127.0.0.1:{otlp_port}/healthz",
                     work / "sidecar.log"),
            _process(simulator, "the simulator", f"http://127.0.0.1:{sim_port}/v1/models",
                     work / "simulator.log"),
        ):  # fmt: skip
            bench.url = f"http://127.0.0.1:{sim_port}"
            bench.model = httpx.get(bench.url + "/v1/models", timeout=10).json()["data"][0]["id"]
            for row in rows:
                if row.status != "ok":
                    continue
                print(f"running {row.client} …", file=sys.stderr, flush=True)
                time.sleep(1.0)  # windows apart: no request of one client is in another's
                start = datetime.now(UTC)
                try:
                    bench.drive(row)
                except (RuntimeError, StopIteration) as exc:
                    row.status = f"failed: {exc}"
                    print(row.status, file=sys.stderr)
                row.window = row.own_window or (start, datetime.now(UTC))
            sent = sum(r.client_figures.get("requests", 0) for r in rows)
            bench.settle(sent)
        for row in rows:
            if row.window is not None:
                bench.server_side(row)
                if row.status == "ok":
                    bench.gap(row)
    finally:
        bench.engine.dispose()
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return rows


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ratio(value: float | None, refs: Sequence[float | None]) -> str:
    known = [r for r in refs if r]
    if value is None or not known:
        return "-"
    ratios = spread([value / r for r in known])
    if len(known) == 1:
        return f"{ratios.median:.3f}"
    return f"{ratios.median:.3f} ({ratios.low:.3f}–{ratios.high:.3f})"


def table(rows: Sequence[Row], args: argparse.Namespace) -> str:
    refs = [r.client_figures for r in rows if r.client == "asyncio" and r.status == "ok"]
    lines = [
        f"simulator llama-3.1-8b-h200x1; {args.concurrency} concurrent streams, {args.input} in "
        f"/ {args.output} out tokens, {args.seconds:g} s each; ms unless noted; every request "
        "counted; ratios: p50 / asyncio's p50 in this run (the reference; against each of its "
        "runs: median (min–max))",
        "",
        "| client | reqs | req/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | E2E p50 | E2E p99 "
        "| p50 ratios TTFT/TPOT/E2E |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        f = r.client_figures
        if r.status != "ok":
            lines.append(f"| {r.client} | {r.status} |" + " |" * 8)
            continue
        ratios = "/".join(
            _ratio(f[f"{m}_p50"], [ref.get(f"{m}_p50") for ref in refs])
            for m in ("ttft", "tpot", "e2e")
        )
        lines.append(
            f"| {r.client} | {f['requests']} | {f['rps']:.2f} | {_ms(f['ttft_p50'])} | "
            f"{_ms(f['ttft_p99'])} | {_ms(f['tpot_p50'])} | {_ms(f['tpot_p99'])} | "
            f"{_ms(f['e2e_p50'])} | {_ms(f['e2e_p99'])} | {ratios} |"
        )
    lines += [
        "",
        "Server side (what the sidecar stored for each client's window):",
        "",
        "| client | reqs | req/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | E2E p50 | E2E p99 "
        "| prompt tokens (mean) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r.server
        if not s or "error" in s:
            lines.append(
                f"| {r.client} | {s.get('error', r.status) if s else r.status} |" + " |" * 8
            )
            continue
        tokens = s["mean_input_tokens"]
        lines.append(
            f"| {r.client} | {s['requests']} | {_rate(s['rps'])} | {_ms(s['ttft_p50'])} | "
            f"{_ms(s['ttft_p99'])} | {_ms(s['tpot_p50'])} | {_ms(s['tpot_p99'])} | "
            f"{_ms(s['e2e_p50'])} | {_ms(s['e2e_p99'])} | "
            f"{'-' if tokens is None else f'{tokens:.0f}'} |"
        )
    lines += [
        "",
        "Client ↔ engine gap (client − server, joined by trace id):",
        "",
        "| client | joined | TTFT gap p50 | TTFT gap p99 | E2E gap p50 | E2E gap p99 |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        g = r.gap
        if not g:
            lines.append(f"| {r.client} | {r.status} | | | | |")
        elif g.get("joined") is None:
            lines.append(f"| {r.client} | {g['note']} | | | | |")
        else:
            lines.append(
                f"| {r.client} | {g['joined']} of {g['calls']} | {_ms(g.get('ttft_gap_p50'))} | "
                f"{_ms(g.get('ttft_gap_p99'))} | {_ms(g.get('e2e_gap_p50'))} | "
                f"{_ms(g.get('e2e_gap_p99'))} |"
            )
    return "\n".join(lines)


def make_tokenizer(path: Path) -> None:
    """A byte-level BPE trained on AIPerf's own prompt corpus (its ``shakespeare.txt``),
    10 000 tokens, saved with ``save_pretrained`` (run with the tools' packages on
    ``PYTHONPATH``). The size is chosen so that a token averages about 4 characters of
    that text (4.08 measured; 3.67 on GuideLLM's Faker text): the simulator counts a
    prompt's tokens as its characters / 4, so the tools' "256-token" prompts weigh about
    256 tokens on the server too (the first tokenizer, 4000 tokens of Python sources,
    averaged ~2.7 characters, and the server saw ~170)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=10_000,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    from aiperf.dataset import generator

    corpus = Path(generator.__file__).parent / "assets" / "shakespeare.txt"
    tok.train([str(corpus)], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    fast.save_pretrained(str(path))
    print(f"saved a {tok.get_vocab_size()}-token BPE tokenizer in {path}")


def _iso(window: tuple[datetime, datetime] | None) -> list[str] | None:
    return None if window is None else [t.isoformat() for t in window]


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--input", type=int, default=256, help="prompt tokens")
    parser.add_argument("--output", type=int, default=64, help="output tokens")
    parser.add_argument(
        "--clients",
        default=",".join(("asyncio", *(c for c in CLIENTS if c != "asyncio"), "asyncio")),
        help="in this order; the reference, asyncio, first and last by default",
    )
    parser.add_argument("--tools-path", type=Path, default=Path("/tmp/h18-tools"))
    parser.add_argument("--tokenizer", type=Path, default=Path("/tmp/h18-tok"))
    parser.add_argument("--require-tools", action="store_true")
    parser.add_argument("--store", default=None, help="a store URL (default: a SQLite file)")
    parser.add_argument("--quick", action="store_true", help="asyncio and Locust ×1, briefly")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, files)")
    parser.add_argument("--make-tokenizer", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--otlp", default="", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.serve is not None:
        _serve(args.serve, args.otlp)
        return []
    if args.make_tokenizer is not None:
        make_tokenizer(args.make_tokenizer)
        return []
    if args.quick:
        args.clients, args.seconds, args.concurrency, args.output = "asyncio,locust1", 2.0, 2, 8
    unknown = set(args.clients.split(",")) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown clients {sorted(unknown)}; choose from {','.join(CLIENTS)}")
    if args.seconds <= 0 or args.concurrency < 1 or args.input < 1 or args.output < 1:
        parser.error("--seconds, --concurrency, --input and --output must be positive")
    rows = run_all(args)
    print(table(rows, args))
    figures = [
        {**dataclasses.asdict(r), "window": _iso(r.window), "own_window": _iso(r.own_window)}
        for r in rows
    ]
    settings = {k: getattr(args, k) for k in ("concurrency", "seconds", "input", "output")}
    write_json(args.json, {"settings": settings, "clients": figures})
    return figures


if __name__ == "__main__":
    main()
