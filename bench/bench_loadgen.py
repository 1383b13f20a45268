"""How much load one generator process drives, and what its machinery costs.

A stand-in server in a subprocess (its own CPU, no GIL shared) answers every request at once
with an SSE stream of ``--tokens`` chunks, so the client side is the bottleneck. Prints, for
``--users`` concurrent users over ``--seconds``:

1. the reference: a bare loop of httpx streaming requests (read every line, nothing else);
2. ``loadgen``'s runner on the same server (prompts, timing each chunk, results, the self-
   monitor, the progress hook): requests and tokens per second, the ratio to the reference,
   and what the self-monitor saw (event-loop lag p99, CPU share of the loop thread).

    .venv/bin/python bench/bench_loadgen.py [--users 32] [--seconds 10] [--tokens 64]
        [--repeats 3]   # each measured that often, alternating; the best of each is shown
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from harness.results import write_json

from core.loadtest import ScenarioKind
from loadgen.client import Endpoint
from loadgen.runner import Runner
from loadgen.scenarios import steady
from loadgen.workload import DistKind, Lengths, Sampled

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


@contextmanager
def server(tokens: int) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [sys.executable, __file__, "--serve", str(port), "--tokens", str(tokens)]
    process = subprocess.Popen(argv)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.post(url + "/v1/chat/completions", json={}, timeout=1).read()
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
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.serve is not None:
        _serve(args.serve, args.tokens)
        return {}
    best_bare, best_run, runner = 0.0, None, None
    with server(args.tokens) as url:
        for _ in range(args.repeats):  # alternate, keep the best of each: a shared box is noisy
            t0 = time.perf_counter()
            done, chunks = asyncio.run(bare(url, args.users, args.seconds))
            bare_s = time.perf_counter() - t0
            if done / bare_s > best_bare:
                best_bare, best_chunks = done / bare_s, chunks / bare_s
            lengths = Lengths(DistKind.FIXED, args.tokens)
            workload = Sampled(Lengths(DistKind.FIXED, 64), lengths, np.random.default_rng())
            attempt = Runner(Endpoint(url, MODEL), steady(args.users, args.seconds), workload)
            run = asyncio.run(attempt.run(name="bench", scenario=ScenarioKind.STEADY))
            if best_run is None or len(run.results) > len(best_run.results):
                best_run, runner = run, attempt
    assert best_run is not None
    assert runner is not None
    run = best_run
    ok = [r for r in run.results if r.ok]
    span = max(r.done_s for r in ok) if ok else args.seconds
    results = {
        "bare_rps": best_bare,
        "bare_chunks_per_s": best_chunks,
        "loadgen_rps": len(ok) / span,
        "loadgen_tokens_per_s": sum(r.output_tokens for r in ok) / span,
        "errors": len(run.results) - len(ok),
        "generator": runner.monitor_report.to_dict(),
    }
    results["ratio"] = results["loadgen_rps"] / best_bare if best_bare else 0.0
    print(f"{args.users} users, {args.tokens}-token streams, {args.seconds:g} s each")
    print(
        f"reference: bare httpx loop   {results['bare_rps']:8.1f} req/s "
        f"{results['bare_chunks_per_s']:9.0f} chunks/s"
    )
    print(
        f"loadgen runner               {results['loadgen_rps']:8.1f} req/s "
        f"{results['loadgen_tokens_per_s']:9.0f} tokens/s  ({results['ratio']:.2f}x the reference)"
    )
    gen = results["generator"]
    print(
        f"self-monitor: loop lag p99 {gen['loop_lag_p99_s'] * 1e3:.1f} ms, "
        f"CPU share {gen['cpu_share']:.0%}; warnings: {len(run.warnings)}"
    )
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
