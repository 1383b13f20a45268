"""Sidecar ingest benchmark (issue 35, item 3): CPU per span of the OTLP ingest pipeline.

What is timed is what a decoder process does with one export (``collector.decoding``), the
same functions whether the export came over OTLP/HTTP or gRPC: the body as received →
``ingest.prepare_body`` (pre-decode bound, protobuf parse, reading the spans, mapping,
plausibility rules, spool encoding; in a checkout from before it, ``ingest.decode_body`` then
``ingest.prepare``) → the pickle that carries the result back to the receiver, and the
receiver's unpickling of it. The reference is a bare
``ExportTraceServiceRequest.FromString`` of the same bodies, measured in the same rounds.

Exports are OTLP protobuf of 512 spans (the OpenTelemetry SDK's ``max_export_batch_size``),
with the attribute names each server really sends:

* ``vllm``: vLLM V1 ``llm_request`` spans (the ``gen_ai.latency.*`` / ``gen_ai.usage.*`` /
  ``gen_ai.request.*`` attributes of its ``do_tracing``), one resource, scope
  ``vllm.llm_engine``;
* ``mix``: one resource per source in one export: vLLM, SGLang (``Req …`` roots with their
  thread spans and stage slices), TGI (Rust duration strings), TensorRT-LLM, llm-d's P/D
  proxy (``forward_request`` / ``prefill`` / ``decode``), an OpenAI client instrumented by
  OpenLLMetry (CLIENT spans with chunk events), GenAI server spans and plain HTTP spans.

Each round runs the reference and the pipeline once (ABBA order from round to round) and
takes their ratio within the round, on CPU time of the process (``time.process_time``), so
that load on a shared host moves both alike; the median and the range over rounds are
printed. ``--against DIR`` runs the same rounds, interleaved, against another checkout of
the code (e.g. a ``git worktree`` of the commit before a change): each checkout is measured in
its own worker process and the before → after ratio is taken within each round.
A third case, in the same rounds, is the floor of any pure-Python ingest: parsing the
export and a plain loop reading every span attribute into a dict through protobuf's Python
API (``read_attributes``); its share of the pipeline says what a native extractor could save.
``--profile`` adds the top frames of a ``cProfile`` pass on the CPU clock, as shares of the
profiled run (the profiler's own cost per call inflates absolute times several-fold).

    .venv/bin/python bench/bench_ingest.py --rounds 6 --against /tmp/ingest-before --profile
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.interleave import add_round_arguments, ratio_spread, round_orders, spread
from harness.results import write_json
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

ROOT = Path(__file__).resolve().parents[1]
#: ``BatchSpanProcessor``'s default ``max_export_batch_size``.
SDK_BATCH = 512
MIXES = ("vllm", "mix")
MS = 1_000_000
SERVER, INTERNAL, CLIENT = 2, 1, 3


# --- exports ------------------------------------------------------------------------------


def kv(key: str, value: Any) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, tuple):
        items = [kv("", item).value for item in value]
        return KeyValue(key=key, value=AnyValue(array_value={"values": items}))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def resource(service: str) -> dict[str, Any]:
    """What the OpenTelemetry Python SDK puts on every resource."""
    attrs = {
        "telemetry.sdk.language": "python",
        "telemetry.sdk.name": "opentelemetry",
        "telemetry.sdk.version": "1.38.0",
        "service.name": service,
    }
    return {"attributes": [kv(k, v) for k, v in attrs.items()]}


class Shapes:
    """Span builders with the attribute names each source sends (values vary per request)."""

    def __init__(self, seed: int, base_ns: int) -> None:
        self.rng = random.Random(seed)
        self.base_ns = base_ns

    def ids(self, trace_bytes: int = 16) -> tuple[bytes, bytes]:
        trace = self.rng.randbytes(trace_bytes).rjust(16, b"\0")
        return trace, self.rng.randbytes(8)

    def span(self, trace: bytes, name: str, kind: int, start_ns: int, end_ns: int,
             attrs: dict[str, Any], parent: bytes = b"", status: int = 0,
             events: tuple[tuple[str, int], ...] = ()) -> Span:  # fmt: skip
        return Span(
            trace_id=trace, span_id=self.rng.randbytes(8), parent_span_id=parent, name=name,
            kind=kind, start_time_unix_nano=start_ns, end_time_unix_nano=end_ns,
            attributes=[kv(k, v) for k, v in attrs.items()], status=Status(code=status),
            events=[Span.Event(name=n, time_unix_nano=t) for n, t in events],
        )  # fmt: skip

    def timings(self) -> tuple[int, float, float, float, float, int, int]:
        r = self.rng
        prompt, out = r.randint(50, 4000), r.randint(2, 1024)
        queue, prefill = r.uniform(0.001, 0.2), r.uniform(0.01, 0.4)
        decode = out * r.uniform(0.008, 0.03)
        start = self.base_ns - r.randint(1, 30_000) * MS
        return start, queue, prefill, decode, queue + prefill + decode, prompt, out

    def vllm(self, trace: bytes | None = None, parent: bytes = b"") -> Span:
        """vLLM V1 ``OutputProcessor.do_tracing``."""
        start, queue, prefill, decode, e2e, prompt, out = self.timings()
        trace = trace or self.ids()[0]
        attrs = {
            "gen_ai.response.model": "meta-llama/Llama-3.1-8B-Instruct",
            "gen_ai.request.id": f"cmpl-{self.rng.randbytes(8).hex()}-0",
            "gen_ai.request.temperature": 0.7,
            "gen_ai.request.top_p": 1.0,
            "gen_ai.request.max_tokens": 1024,
            "gen_ai.request.n": 1,
            "gen_ai.usage.num_sequences": 1,
            "gen_ai.usage.prompt_tokens": prompt,
            "gen_ai.usage.completion_tokens": out,
            "gen_ai.latency.time_in_queue": queue,
            "gen_ai.latency.time_to_first_token": queue + prefill,
            "gen_ai.latency.e2e": e2e,
            "gen_ai.latency.time_in_model_prefill": prefill,
            "gen_ai.latency.time_in_model_decode": decode,
            "gen_ai.latency.time_in_model_inference": prefill + decode,
            "gen_ai.response.finish_reasons": '["stop"]',
        }
        return self.span(trace, "llm_request", SERVER, start, start + int(e2e * 1e9), attrs,
                         parent)  # fmt: skip

    def trtllm(self) -> Span:
        start, queue, prefill, _, e2e, prompt, out = self.timings()
        attrs = {
            "gen_ai.request.id": str(self.rng.randint(1, 1 << 30)),
            "gen_ai.request.max_tokens": 512,
            "gen_ai.usage.prompt_tokens": prompt,
            "gen_ai.usage.completion_tokens": out,
            "gen_ai.latency.time_to_first_token": queue + prefill,
            "gen_ai.latency.e2e": e2e,
            "gen_ai.latency.time_in_queue": queue,
            "gen_ai.response.finish_reasons": '["length"]',
        }
        return self.span(self.ids()[0], "llm_request", SERVER, start, start + int(e2e * 1e9),
                         attrs)  # fmt: skip

    def sglang(self) -> list[Span]:
        """A ``Req`` root (64-bit trace id) with a thread span and two stage slices."""
        start, queue, prefill, _, e2e, prompt, out = self.timings()
        trace, _ = self.ids(8)
        end = start + int(e2e * 1e9)
        root = self.span(trace, f"Req {self.rng.randbytes(4).hex()}", SERVER, start, end, {
            "gen_ai.latency.time_to_first_token": queue + prefill,
            "gen_ai.latency.e2e": e2e,
            "gen_ai.latency.time_in_queue": queue,
            "gen_ai.usage.prompt_tokens": prompt,
            "gen_ai.usage.completion_tokens": out,
            "gen_ai.usage.cached_tokens": prompt // 2,
        })  # fmt: skip
        thread = self.span(trace, "Scheduler (host:10.0.0.7 | pid:4242)", INTERNAL, start, end,
                           {"thread_label": "scheduler"}, root.span_id)  # fmt: skip
        mid = start + int((queue + prefill) * 1e9)
        slices = [
            self.span(trace, "prefill forward", INTERNAL, start + int(queue * 1e9), mid,
                      {"batch_size": 8}, thread.span_id),
            self.span(trace, "decode loop", INTERNAL, mid, end, {"batch_size": 32},
                      thread.span_id),
        ]  # fmt: skip
        return [root, thread, *slices]

    def tgi(self) -> Span:
        start, queue, _, _, e2e, prompt, out = self.timings()
        attrs = {
            "parameters": "GenerateParameters { best_of: None, temperature: Some(0.7), .. }",
            "total_time": f"{e2e:.6f}s",
            "validation_time": "1.2ms",
            "queue_time": f"{queue * 1e6:.1f}µs",
            "inference_time": f"{e2e - queue:.6f}s",
            "time_per_token": f"{e2e / out * 1e3:.3f}ms",
            "seed": "None",
            "prompt_tokens": str(prompt),
            "generated_tokens": str(out),
        }
        return self.span(self.ids()[0], "generate", SERVER, start, start + int(e2e * 1e9), attrs)

    def pd_proxy(self) -> list[Span]:
        """llm-d's routing sidecar: the request, its prefill and decode legs, and the decode
        instance's own ``llm_request`` below the decode leg."""
        start, _, prefill, _, e2e, _, _ = self.timings()
        trace, _ = self.ids()
        end = start + int(e2e * 1e9)
        connector = {"llm_d.pd_proxy.connector": "nixlv2"}
        request = self.span(
            trace,
            "forward_request",
            SERVER,
            start,
            end,
            {**connector, "llm_d.pd_proxy.disaggregation_used": True},
        )
        prefill_leg = self.span(
            trace,
            "prefill",
            INTERNAL,
            start,
            start + int(prefill * 1e9),
            {**connector, "llm_d.pd_proxy.prefill_target": "10.0.0.9:8200"},
            request.span_id,
        )
        decode_leg = self.span(trace, "decode", INTERNAL, start + int(prefill * 1e9), end,
                               connector, request.span_id)  # fmt: skip
        return [request, prefill_leg, decode_leg, self.vllm(trace, decode_leg.span_id)]

    def client(self) -> Span:
        """OpenLLMetry's ``openai.chat`` CLIENT span of a streamed call."""
        start, queue, prefill, _, e2e, prompt, out = self.timings()
        first = start + int((queue + prefill + 0.01) * 1e9)
        attrs = {
            "llm.request.type": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "Llama-3.1-8B-Instruct",
            "gen_ai.response.model": "meta-llama/Llama-3.1-8B-Instruct",
            "llm.is_streaming": True,
            "llm.headers": "None",
            "gen_ai.openai.api_base": "http://10.0.0.7:8000/v1/",
            "gen_ai.usage.prompt_tokens": prompt,
            "gen_ai.usage.completion_tokens": out,
            "llm.usage.total_tokens": prompt + out,
            "gen_ai.response.id": f"chatcmpl-{self.rng.randbytes(6).hex()}",
        }
        events = tuple(("gen_ai.content.completion.chunk", first + i * 20 * MS) for i in range(4))
        return self.span(self.ids()[0], "openai.chat", CLIENT, start, start + int(e2e * 1e9),
                         attrs, events=events)  # fmt: skip

    def genai(self) -> Span:
        start, _, _, _, e2e, prompt, out = self.timings()
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "vllm",
            "gen_ai.request.model": "qwen2.5-7b",
            "gen_ai.usage.input_tokens": prompt,
            "gen_ai.usage.output_tokens": out,
            "gen_ai.response.finish_reasons": ("stop",),
            "gen_ai.server.time_to_first_token": 0.12,
        }
        return self.span(self.ids()[0], "chat qwen2.5-7b", SERVER, start,
                         start + int(e2e * 1e9), attrs)  # fmt: skip

    def http(self) -> Span:
        start, *_ = self.timings()
        attrs = {
            "http.request.method": "POST",
            "url.path": "/v1/chat/completions",
            "http.response.status_code": 200,
            "server.address": "10.0.0.7",
            "network.protocol.version": "1.1",
        }
        return self.span(self.ids()[0], "POST /v1/chat/completions", SERVER, start,
                         start + 900 * MS, attrs)  # fmt: skip


def _resource_spans(service: str, scope: str, spans: list[Span]) -> ResourceSpans:
    return ResourceSpans(
        resource=resource(service), scope_spans=[ScopeSpans(scope={"name": scope}, spans=spans)]
    )


def make_export(mix: str, shapes: Shapes, count: int = SDK_BATCH) -> bytes:
    """One export of ``count`` spans of the ``mix``."""
    if mix == "vllm":
        spans = [shapes.vllm() for _ in range(count)]
        return ExportTraceServiceRequest(
            resource_spans=[_resource_spans("vllm", "vllm.llm_engine", spans)]
        ).SerializeToString()
    # (service, scope, builder, share of the spans); builders may make several spans.
    parts: list[tuple[str, str, Any, float]] = [
        ("vllm", "vllm.llm_engine", shapes.vllm, 0.30),
        ("sglang", "sglang", shapes.sglang, 0.16),
        ("text-generation-inference.router", "text_generation_router", shapes.tgi, 0.10),
        ("trtllm-serve", "trt.llm", shapes.trtllm, 0.08),
        ("llm-d-routing-sidecar", "llm-d-inference-scheduler", shapes.pd_proxy, 0.12),
        ("chat-app", "opentelemetry.instrumentation.openai.v1", shapes.client, 0.12),
        ("gateway", "genai", shapes.genai, 0.06),
        ("gateway-http", "opentelemetry.instrumentation.fastapi", shapes.http, 0.06),
    ]
    resources = []
    made = 0
    for i, (service, scope, build, share) in enumerate(parts):
        want = count - made if i == len(parts) - 1 else round(count * share)
        spans: list[Span] = []
        while len(spans) < want:
            built = build()
            spans.extend(built if isinstance(built, list) else [built])
        spans = spans[:want]
        made += len(spans)
        resources.append(_resource_spans(service, scope, spans))
    return ExportTraceServiceRequest(resource_spans=resources).SerializeToString()


def make_exports(mix: str, exports: int, spans: int, base_ns: int, seed: int = 35) -> list[bytes]:
    shapes = Shapes(seed, base_ns)
    return [make_export(mix, shapes, spans) for _ in range(exports)]


# --- the worker: one checkout's pipeline ---------------------------------------------------


class Worker:
    """Times this process's ``infersight`` (whichever checkout ``sys.path`` finds)."""

    def __init__(self, base_ns: int, exports: int, spans: int) -> None:
        import pickle
        from dataclasses import replace

        from infersight.collector import decoding, ingest
        from infersight.collector.assembly import Reassembly
        from infersight.collector.ingest import decode_body, prepare
        from infersight.collector.mapping import MappingContext
        from infersight.collector.otlp import PROTOBUF, Limits
        from infersight.core.accept import AcceptWindow

        prepare_body = getattr(ingest, "prepare_body", None)

        self.bodies = {mix: make_exports(mix, exports, spans, base_ns) for mix in MIXES}
        self.spans = {
            mix: sum(
                len(s.spans)
                for r in ExportTraceServiceRequest.FromString(bodies[0]).resource_spans
                for s in r.scope_spans
            )
            * len(bodies)
            for mix, bodies in self.bodies.items()
        }
        self.now = base_ns / 1e9
        limits = Limits()
        accept = AcceptWindow.of_days(14)
        reassembly = Reassembly()
        # The context as a decoder child holds it (``decoding._serve``).
        context = replace(
            MappingContext("node-1/vllm-0"),
            scraped_model=decoding._constant("meta-llama/Llama-3.1-8B-Instruct"),
            scraped_adapters=decoding._constant_set(frozenset()),
        )

        def pipeline(body: bytes) -> Any:
            if prepare_body is not None:  # what a decoder process runs (a one-pass reader)
                prepared = prepare_body(
                    body, "identity", PROTOBUF, limits, context, self.now, accept, reassembly
                )
            else:  # a checkout from before it (``--against``)
                decoded = decode_body(body, "identity", PROTOBUF, limits)
                prepared = prepare(decoded, context, self.now, accept, reassembly)
            wire = pickle.dumps(("ok", prepared, False), pickle.HIGHEST_PROTOCOL)
            return pickle.loads(wire)

        self.pipeline = pipeline
        self.tree = str(Path(decoding.__file__).resolve().parents[2])

    def run(self, case: str, mix: str, repeats: int) -> float:
        """CPU µs per span of ``case`` over the mix's exports."""
        bodies = self.bodies[mix]
        parse = ExportTraceServiceRequest.FromString
        work = {"decode": parse, "attributes": read_attributes}.get(case, self.pipeline)
        started = time.process_time()
        for _ in range(repeats):
            for body in bodies:
                work(body)
        return (time.process_time() - started) * 1e6 / (self.spans[mix] * repeats)

    def profile(self, mix: str, top: int) -> list[tuple[str, float, float]]:
        """(frame, self %, cumulative %), the top by self time: shares of the profiled run,
        since the profiler's own cost per call (a CPU clock read at each end) inflates the
        absolute times several-fold."""
        import cProfile
        import pstats

        # CPU time, not wall time: on a shared host a preempted call would otherwise count
        # the time other processes ran.
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        for _ in range(2):
            for body in self.bodies[mix]:
                self.pipeline(body)
        profiler.disable()
        stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
        total = sum(tottime for _, _, tottime, _, _ in stats.values()) / 100
        rows = []
        for (file, line, name), (_, _, tottime, cumtime, _) in stats.items():
            where = f"{Path(file).name}:{line}" if line else "~"
            rows.append((f"{name} ({where})", tottime / total, cumtime / total))
        rows.sort(key=lambda row: -row[1])
        return rows[:top]


def read_attributes(body: bytes) -> list[dict[str, Any]]:
    """The floor of reading spans through protobuf's Python API: parse, then a plain loop
    that reads every span attribute into a dict (no limits, ids, mapping or encoding)."""
    out = []
    for resource_spans in ExportTraceServiceRequest.FromString(body).resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attrs = {}
                for kv in span.attributes:
                    value = kv.value
                    kind = value.WhichOneof("value")
                    attrs[kv.key] = getattr(value, kind) if kind else None
                out.append(attrs)
    return out


def serve_worker(args: argparse.Namespace) -> None:
    worker = Worker(args.base_ns, args.exports, args.spans)
    print(json.dumps({"tree": worker.tree, "spans": worker.spans}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "profile":
            answer: Any = worker.profile(command["mix"], command["top"])
        else:
            answer = worker.run(command["op"], command["mix"], command["repeats"])
        print(json.dumps(answer), flush=True)


class Remote:
    """A worker process over one checkout (``tree``: prepended to ``PYTHONPATH``)."""

    def __init__(self, name: str, tree: Path | None, args: argparse.Namespace) -> None:
        self.name = name
        env = dict(os.environ)
        if tree is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")])
        command = [sys.executable, __file__, "--worker", "--base-ns", str(args.base_ns),
                   "--exports", str(args.exports), "--spans", str(args.spans)]  # fmt: skip
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd="/"
        )
        hello = json.loads(self._line())
        self.tree = hello["tree"]
        if tree is not None and Path(self.tree) != tree.resolve():
            raise SystemExit(f"{name}: the worker imported infersight from {self.tree}")

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.name} worker exited")
        return line

    def ask(self, **command: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._line())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


# --- the run -------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_round_arguments(parser, rounds=6)
    parser.add_argument("--exports", type=int, default=4, help="exports per mix (default 4)")
    parser.add_argument("--spans", type=int, default=SDK_BATCH, help="spans per export")
    parser.add_argument("--repeats", type=int, default=2, help="passes per case and round")
    parser.add_argument("--mix", choices=(*MIXES, "both"), default="both")
    parser.add_argument("--against", type=Path, help="another checkout to compare (before)")
    parser.add_argument("--profile", action="store_true", help="print the top profile frames")
    parser.add_argument("--top", type=int, default=14, help="profile frames shown")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--base-ns", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        serve_worker(args)
        return
    args.base_ns = args.base_ns or time.time_ns()
    trees: dict[str, Path | None] = {"after": None}
    if args.against is not None:
        trees = {"before": args.against, "after": None}
    remotes = {name: Remote(name, tree, args) for name, tree in trees.items()}
    mixes = MIXES if args.mix == "both" else (args.mix,)
    for remote in remotes.values():
        print(f"{remote.name}: infersight from {remote.tree}")
    print(f"{args.exports} exports × {args.spans} spans per mix, {args.repeats} passes per case, "
          f"{args.rounds} rounds ({args.order}); CPU µs per span")  # fmt: skip
    # Every (tree, case) once per round, in ABBA order over the list; the attribute-reading
    # floor (the same code whatever the checkout) once.
    cases = [(name, case) for name in remotes for case in ("decode", "pipeline")]
    cases.insert(0, ("after", "attributes"))
    figures: dict[str, Any] = {}
    try:
        for mix in mixes:
            results: dict[tuple[str, str], list[float]] = {case: [] for case in cases}
            labels = [f"{n}:{c}" for n, c in cases]
            for r, order in enumerate(round_orders(labels, args.rounds, args.order)):
                row = []
                for label in order:
                    name, case = label.split(":")
                    us = remotes[name].ask(op=case, mix=mix, repeats=args.repeats)
                    results[name, case].append(us)
                for name in remotes:
                    pipe, bare = results[name, "pipeline"][-1], results[name, "decode"][-1]
                    row.append(f"{name} {pipe:6.1f} µs/span (decode {bare:.2f}, "
                               f"{bare / pipe * 100:.2f} %)")  # fmt: skip
                print(f"[{mix}] round {r + 1}: " + " | ".join(row), flush=True)
            figures[mix] = summarise(mix, remotes, results)
            if args.profile:
                for name, remote in remotes.items():
                    print(f"[{mix}] {name}: top frames by self time (cProfile, CPU clock, "
                          f"% of the profiled pipeline)")  # fmt: skip
                    print(f"    {'self':>6} {'cum':>6}  frame")
                    for frame, own, cum in remote.ask(op="profile", mix=mix, top=args.top):
                        print(f"    {own:5.1f}% {cum:5.1f}%  {frame}")
    finally:
        for remote in remotes.values():
            remote.close()
    write_json(args.json, figures)


def summarise(mix: str, remotes: dict[str, Remote], results: dict[tuple[str, str], list[float]]
              ) -> dict[str, Any]:  # fmt: skip
    out: dict[str, Any] = {}
    for name in remotes:
        pipe, bare = results[name, "pipeline"], results[name, "decode"]
        share = ratio_spread(bare, pipe)  # decode µs / pipeline µs = throughput share
        percent = spread([v * 100 for v in share.values])
        per_cpu_s = spread([1e6 / us for us in pipe])
        print(f"[{mix}] {name}: {statistics.median(pipe):.1f} µs/span "
              f"({spread(pipe).text(' µs', '.1f')}), {per_cpu_s.text(' spans/CPU-s', ',.0f')}; "
              f"bare decode {statistics.median(bare):.2f} µs/span; "
              f"share of bare decode {percent.text(' %')}")  # fmt: skip
        out[name] = {
            "pipeline_us_per_span": spread(pipe).as_dict(),
            "decode_us_per_span": spread(bare).as_dict(),
            "spans_per_cpu_s": per_cpu_s.as_dict(),
            "share_of_bare_decode": share.as_dict(),
        }
    floor = results["after", "attributes"]
    share_floor = ratio_spread(floor, results["after", "pipeline"])
    print(f"[{mix}] reading every attribute into a dict alone (parse + loop): "
          f"{statistics.median(floor):.1f} µs/span, {share_floor.text('×')} of the pipeline "
          f"after")  # fmt: skip
    out["attributes_floor_us_per_span"] = spread(floor).as_dict()
    if "before" in remotes:
        speedup = ratio_spread(results["before", "pipeline"], results["after", "pipeline"])
        print(f"[{mix}] after / before, spans per CPU-second: {speedup.text('×')}")
        out["speedup"] = speedup.as_dict()
    return out


if __name__ == "__main__":
    main()
