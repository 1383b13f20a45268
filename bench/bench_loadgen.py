"""How much load one generator process drives, and what its machinery costs.

A stand-in server in a subprocess (its own CPU, no GIL shared) answers every request at once
with an SSE stream of ``--tokens`` chunks, so the client side is the bottleneck. Prints, for
``--users`` concurrent users over ``--seconds``:

1. the reference: a bare loop of httpx streaming requests (read every line, nothing else);
2. ``loadgen``'s runner on the same server (prompts, timing each chunk, results, the self-
   monitor, the progress hook): requests and tokens per second, the ratio to the reference,
   and what the self-monitor saw (event-loop lag p99, CPU share of the loop thread).

    .venv/bin/python bench/bench_loadgen.py [--users 32] [--seconds 10] [--tokens 64]
        [--repeats 3]   # rounds: the two alternate ABBA; medians, and each round's ratio's
                        # median and spread (min–max)

With ``--max-rate``, instead: the highest request rate one asyncio process and ``--workers``
(2) Locust worker processes drive against the real simulator (its OpenAI-compatible server in
a subprocess: Llama 3.1 8B on an H200, a batch of up to ``--max-num-seqs``, short requests)
before the generator warns that it is the bottleneck. Users rise through ``--levels``, each
held ``--seconds``; an engine stops rising at its first warning (``--through``: it goes on,
and the highest rate driven at all is printed too). The reference is the asyncio
engine's figure in the same run: the Locust line shows its ratio to it. The two engines
alternate level by level (ABBA: asyncio first at one level, Locust at the next), and Locust's
ratio to asyncio at each level both drove without a warning is printed (median, min–max).

    .venv/bin/python bench/bench_loadgen.py --max-rate [--levels 8,16,32,64,128,256]
        [--seconds 5] [--workers 2]

With ``--compare``: the asyncio engine, Locust with one worker and with two, one after the
other at matched settings (``--users``, ``--seconds``, 256 input and ``--tokens`` output
tokens) against the simulator: TTFT / TPOT / E2E p50 and p99 and req/s, each p50 as a ratio
to the asyncio engine's in the same run (the reference, run first and again last by default so
that it brackets the others: each ratio against both runs, median and min–max); ``--engines``
sets the order (an engine named twice runs twice: the order of runs against one server can
matter).

    .venv/bin/python bench/bench_loadgen.py --compare [--users 16] [--seconds 10] [--tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from harness.interleave import interleave, ratio_spread, spread
from harness.results import write_json

from infersight.core.loadtest import LoadTestRun, ScenarioKind, summarise
from infersight.loadgen.client import Endpoint
from infersight.loadgen.distributed import RunSpec
from infersight.loadgen.locust_engine import LocustEngine
from infersight.loadgen.runner import Runner
from infersight.loadgen.scenarios import steady
from infersight.loadgen.workload import DistKind, Lengths, Sampled

MODEL = "bench"


def _app(tokens: int) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    chunk = json.dumps({"choices": [{"index": 0, "delta": {"content": " w"}}]})
    usage = json.dumps({"choices": [], "usage": {"completion_tokens": tokens}})

    async def lines() -> AsyncIterator[str]:
        for _ in range(tokens):
            yield f"data: {chunk}\n\n"
        yield f"data: {usage}\n\ndata: [DONE]\n\n"

    async def chat(request: Request) -> StreamingResponse:
        await request.body()
        return StreamingResponse(lines(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def _serve(port: int, tokens: int) -> None:
    import uvicorn

    uvicorn.run(_app(tokens), host="127.0.0.1", port=port, log_level="warning")


SIM_INPUT, SIM_OUTPUT = 32, 16


def _serve_simulator(port: int, max_num_seqs: int) -> None:
    import dataclasses
    from datetime import UTC, datetime

    import uvicorn

    from infersight.simulator.realtime import RealtimeServer
    from infersight.simulator.specs import load_profile

    profile = dataclasses.replace(load_profile("llama-3.1-8b-h200x1"), max_num_seqs=max_num_seqs)
    server = RealtimeServer.standalone("bench-0", profile, epoch=datetime.now(UTC))
    uvicorn.run(server.app(), host="127.0.0.1", port=port, log_level="warning", ws="none")


@contextmanager
def server(tokens: int, simulator: int = 0) -> Iterator[str]:
    """The stand-in server (or, with ``simulator`` = its batch size, the real simulator)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [sys.executable, __file__, "--serve", str(port), "--tokens", str(tokens)]
    argv += ["--serve-simulator", str(simulator)] if simulator else []
    process = subprocess.Popen(argv)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(url + "/v1/models" if simulator else url, timeout=1).read()
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(10)


async def bare(url: str, users: int, seconds: float) -> tuple[int, int]:
    """Requests and chunks a plain httpx loop gets through."""
    done = chunks = 0
    end = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=users, max_keepalive_connections=users)

    async def user(client: httpx.AsyncClient) -> None:
        nonlocal done, chunks
        body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": True}
        while time.perf_counter() < end:
            async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
                async for line in r.aiter_lines():
                    chunks += line.startswith("data:")
            done += 1

    async with httpx.AsyncClient(limits=limits) as client:
        await asyncio.gather(*(user(client) for _ in range(users)))
    return done, chunks


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-rate", action="store_true", help="asyncio vs Locust, simulator")
    parser.add_argument(
        "--compare", action="store_true", help="asyncio, Locust ×1, ×2 side by side"
    )
    parser.add_argument(
        "--engines",
        default="asyncio,locust1,locust2,asyncio",
        help="--compare order (asyncio, the reference, first and last by default)",
    )
    parser.add_argument("--levels", default="8,16,32,64,128,256")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--through", action="store_true", help="every level, warned or not")
    parser.add_argument("--max-num-seqs", type=int, default=1024)
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--serve-simulator", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.serve is not None:
        if args.serve_simulator:
            _serve_simulator(args.serve, args.serve_simulator)
        else:
            _serve(args.serve, args.tokens)
        return {}
    if args.max_rate or args.compare:
        results = max_rate(args) if args.max_rate else compare(args)
        write_json(args.json, results)
        return results
    lengths = Lengths(DistKind.FIXED, args.tokens)
    workload = Sampled(Lengths(DistKind.FIXED, 64), lengths, np.random.default_rng())
    attempts: list[tuple[Runner, LoadTestRun]] = []
    with server(args.tokens) as url:

        def bare_case() -> tuple[float, float]:
            t0 = time.perf_counter()
            done, chunks = asyncio.run(bare(url, args.users, args.seconds))
            bare_s = time.perf_counter() - t0
            return done / bare_s, chunks / bare_s

        def runner_case() -> tuple[float, float]:
            attempt = Runner(Endpoint(url, MODEL), steady(args.users, args.seconds), workload)
            run = asyncio.run(attempt.run(name="bench", scenario=ScenarioKind.STEADY))
            attempts.append((attempt, run))
            ok = [r for r in run.results if r.ok]
            span = max(r.done_s for r in ok) if ok else args.seconds
            return len(ok) / span, sum(r.output_tokens for r in ok) / span

        def show(r: int, names: list[str], got: dict[str, tuple[float, float]]) -> None:
            (bare_rps, _), (rps, _) = got["bare"], got["loadgen"]
            print(f"  round {r + 1}/{args.repeats} [{' '.join(names)}]: bare {bare_rps:.1f} "
                  f"req/s, loadgen {rps:.1f} req/s ({rps / bare_rps:.2f}x)")  # fmt: skip

        print(f"{args.users} users, {args.tokens}-token streams, {args.seconds:g} s each, "
              f"{args.repeats} ABBA rounds")  # fmt: skip
        # The reference and the runner alternate, ABBA: each round's ratio against its own.
        rounds = interleave(
            {"bare": bare_case, "loadgen": runner_case}, args.repeats, on_round=show
        )
    ratio = ratio_spread([r for r, _ in rounds["loadgen"]], [r for r, _ in rounds["bare"]])
    # The self-monitor's figures and the errors: of the round with the most requests.
    runner, run = max(attempts, key=lambda a: len(a[1].results))
    ok = [r for r in run.results if r.ok]
    results = {
        "bare_rps": statistics.median(r for r, _ in rounds["bare"]),
        "bare_chunks_per_s": statistics.median(c for _, c in rounds["bare"]),
        "loadgen_rps": statistics.median(r for r, _ in rounds["loadgen"]),
        "loadgen_tokens_per_s": statistics.median(t for _, t in rounds["loadgen"]),
        "errors": len(run.results) - len(ok),
        "generator": runner.monitor_report.to_dict(),
        "ratio": ratio.median,
        "ratio_spread": ratio.as_dict(),
    }
    print(
        f"reference: bare httpx loop   {results['bare_rps']:8.1f} req/s "
        f"{results['bare_chunks_per_s']:9.0f} chunks/s (medians)"
    )
    print(
        f"loadgen runner               {results['loadgen_rps']:8.1f} req/s "
        f"{results['loadgen_tokens_per_s']:9.0f} tokens/s  ({ratio.text('x')} the reference, "
        "each round's)"
    )
    gen = results["generator"]
    print(
        f"self-monitor: loop lag p99 {gen['loop_lag_p99_s'] * 1e3:.1f} ms, "
        f"CPU share {gen['cpu_share']:.0%}; warnings: {len(run.warnings)}"
    )
    write_json(args.json, results)
    return results


def _level(run: LoadTestRun, users: int) -> dict[str, Any]:
    (summary,) = summarise(run)  # the same throughput `infersight loadtest --json` prints
    return {
        "users": users,
        "rps": summary.throughput_rps,
        "errors": summary.errors,
        "ttft_p50_s": summary.quantile("ttft"),
        "warned": bool(run.warnings),
        "warnings": list(run.warnings),
        "generator": {k: v for k, v in run.config.get("generator", {}).items() if k != "workers"},
    }


def max_rate(args: argparse.Namespace) -> dict[str, Any]:
    levels = [int(x) for x in args.levels.split(",")]
    rows: dict[str, list[dict[str, Any]]] = {"asyncio": [], "locust": []}
    with server(SIM_OUTPUT, simulator=args.max_num_seqs) as url:
        model = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
        spec = RunSpec(
            url, model, input_tokens=f"fixed:{SIM_INPUT}", output_tokens=f"fixed:{SIM_OUTPUT}"
        )
        # The engines alternate level by level, ABBA (asyncio first at one level, Locust first
        # at the next), so that a change of the host's load falls on both; an engine stops
        # rising at its first warning (unless --through), the other goes on.
        stopped: set[str] = set()
        for level, users in enumerate(levels):
            for engine in ("asyncio", "locust") if level % 2 == 0 else ("locust", "asyncio"):
                if engine in stopped:
                    continue
                engine_rows = rows[engine]
                phases = steady(users, args.seconds)
                if engine == "asyncio":
                    workload = Sampled(
                        Lengths(DistKind.FIXED, SIM_INPUT),
                        Lengths(DistKind.FIXED, SIM_OUTPUT),
                        np.random.default_rng(),
                    )
                    runner = Runner(Endpoint(url, model), phases, workload)
                    run = asyncio.run(runner.run(name="bench", scenario=ScenarioKind.STEADY))
                else:
                    locust = LocustEngine(phases, spec, workers=args.workers, drain_s=10.0)
                    run = locust.run(name="bench", scenario=ScenarioKind.STEADY)
                row = _level(run, users)
                engine_rows.append(row)
                gen = row["generator"]
                print(
                    f"{engine:<8} {users:>5} users {row['rps']:8.1f} req/s  TTFT p50 "
                    f"{(row['ttft_p50_s'] or 0) * 1e3:6.1f} ms  lag p99 "
                    f"{gen.get('loop_lag_p99_s', 0) * 1e3:6.1f} ms  "
                    f"CPU {gen.get('cpu_share', 0):4.0%}"
                    f"  {'WARNED' if row['warned'] else 'ok'}",
                    flush=True,
                )
                if row["warned"] and not args.through:
                    stopped.add(engine)
            if len(stopped) == len(rows):
                break
    best = {
        engine: max((r["rps"] for r in engine_rows if not r["warned"]), default=0.0)
        for engine, engine_rows in rows.items()
    }
    ratio = best["locust"] / best["asyncio"] if best["asyncio"] else 0.0
    # Level by level, where both ran without a warning: Locust against asyncio at that level.
    by_level = [
        (a["rps"], lo["rps"]) for a in rows["asyncio"] for lo in rows["locust"]
        if a["users"] == lo["users"] and not a["warned"] and not lo["warned"] and a["rps"]
    ]  # fmt: skip
    driven = {engine: max((r["rps"] for r in rs), default=0.0) for engine, rs in rows.items()}
    print(
        f"simulator: Llama 3.1 8B on an H200, batch up to {args.max_num_seqs}, "
        f"{SIM_INPUT} in / {SIM_OUTPUT} out tokens; {args.seconds:g} s a level"
    )
    print(f"reference: one asyncio process   {best['asyncio']:8.1f} req/s before a warning")
    print(
        f"{args.workers} Locust workers               {best['locust']:8.1f} req/s before a warning "
        f"({ratio:.2f}x the reference)"
    )
    if by_level:
        level_ratio = ratio_spread([lo for _, lo in by_level], [a for a, _ in by_level])
        print(f"Locust / asyncio at each level both drove without a warning: "
              f"{level_ratio.text('x').replace('rounds', 'levels')}")  # fmt: skip
    print(
        f"highest rate driven, warned or not: asyncio {driven['asyncio']:.1f} req/s, "
        f"Locust {driven['locust']:.1f} req/s"
    )
    return {
        "levels": rows,
        "max_rps": best,
        "ratio": ratio,
        "level_ratios": [lo / a for a, lo in by_level],
        "max_rps_driven": driven,
        "workers": args.workers,
    }


COMPARE_INPUT = 256


def compare(args: argparse.Namespace) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    phases = steady(args.users, args.seconds)
    with server(args.tokens, simulator=args.max_num_seqs) as url:
        model = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
        spec = RunSpec(
            url, model, input_tokens=f"fixed:{COMPARE_INPUT}", output_tokens=f"fixed:{args.tokens}"
        )
        for i, engine in enumerate(args.engines.split(",")):
            if engine.startswith("asyncio"):
                workload = Sampled(
                    Lengths(DistKind.FIXED, COMPARE_INPUT),
                    Lengths(DistKind.FIXED, args.tokens),
                    np.random.default_rng(),
                )
                runner = Runner(Endpoint(url, model), phases, workload)
                run = asyncio.run(runner.run(name="bench", scenario=ScenarioKind.STEADY))
            else:
                workers = int(engine.removeprefix("locust"))
                locust = LocustEngine(phases, spec, workers=workers, drain_s=30.0)
                run = locust.run(name="bench", scenario=ScenarioKind.STEADY)
            (summary,) = summarise(run)
            rows[f"{engine} ({i + 1})" if engine in rows else engine] = {
                "rps": summary.throughput_rps,
                "requests": summary.requests,
                "errors": summary.errors,
                "warnings": len(run.warnings),
                **{
                    f"{m}_{q}": summary.quantile(m, key)
                    for m in ("ttft", "tpot", "e2e")
                    for q, key in (("p50", "0.5"), ("p99", "0.99"))
                },
            }
    print(
        f"simulator: Llama 3.1 8B on an H200; {args.users} users, {COMPARE_INPUT} in / "
        f"{args.tokens} out tokens, {args.seconds:g} s each (summaries after the warm-up quarter)"
    )
    print(
        f"{'engine':<10} {'req/s':>6} {'TTFT p50':>9} {'p99':>7} {'TPOT p50':>9} {'p99':>7} "
        f"{'E2E p50':>8} {'p99':>7}  p50s vs asyncio (TTFT TPOT E2E)  warnings"
    )
    # Every asyncio run is the reference (by default it runs first and last, bracketing the
    # others): each ratio against each of them, the median (and min–max with more than one).
    refs = [row for engine, row in rows.items() if engine.startswith("asyncio")]

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1e3:.1f}"

    def versus(value: float | None, metric: str) -> str:
        known = [r[metric] for r in refs if r[metric]]
        if not known:
            return "-"
        ratio = spread([(value or 0) / r for r in known])
        return f"{ratio.median:.3f}" + (
            f" ({ratio.low:.3f}–{ratio.high:.3f})" if len(known) > 1 else ""
        )

    for engine, row in rows.items():
        ratios = " ".join(versus(row[f"{m}_p50"], f"{m}_p50") for m in ("ttft", "tpot", "e2e"))
        print(
            f"{engine:<10} {row['rps']:6.1f} {ms(row['ttft_p50']):>9} {ms(row['ttft_p99']):>7} "
            f"{ms(row['tpot_p50']):>9} {ms(row['tpot_p99']):>7} {ms(row['e2e_p50']):>8} "
            f"{ms(row['e2e_p99']):>7}  {ratios:<31}  {row['warnings']}"
        )
    return {"engines": rows, "users": args.users, "seconds": args.seconds}


if __name__ == "__main__":
    main()
