"""The "connect your server" pages (``docs/connect/``) stay true where they can be checked here:
every flag they give ``infersight sidecar`` (or the group) exists in our command line, the
ports they send to are the sidecar's defaults (gRPC 4317 without a path, HTTP 4318 with
``/v1/traces``), each ``--scrape`` URL has the path the engine registry expects of that
engine's ``/metrics``, and each engine page gives the engine's tracing flags and names the file
of the engine's repository they were read from. The engines themselves (CUDA builds) do not
install here, so their flags are checked against the names recorded from their source, below,
not against their own argument parsers."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import click
import httpx
import pytest

from infersight.cli.commands_sidecar import sidecar
from infersight.cli.group import cli
from infersight.collector.engines import REGISTRY
from tests.peers import free_port
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "docs" / "connect"
BLOCK = re.compile(r"```(sh|yaml)\n(.*?)```", re.S)

# Per page: the engine's tracing flags (or variables), the file of its repository they were
# read from, and the registry's declaration whose /metrics dialect the page scrapes.
ENGINES = {
    "vllm.md": (
        [
            "--otlp-traces-endpoint",
            "--collect-detailed-traces",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        ],
        ["vllm-project/vllm", "vllm/config/observability.py", "vllm/tracing.py"],
        "vllm",
    ),
    "sglang.md": (
        ["--enable-trace", "--otlp-traces-endpoint", "--enable-metrics"],
        ["sgl-project/sglang", "python/sglang/srt/arg_groups/fields/observability.py"],
        "sglang",
    ),
    "tgi.md": (
        ["--otlp-endpoint", "--otlp-service-name"],
        ["huggingface/text-generation-inference", "launcher/src/main.rs"],
        "tgi",
    ),
    "tensorrt-llm.md": (
        ["--otlp_traces_endpoint", "return_perf_metrics", "--extra_llm_api_options"],
        ["NVIDIA/TensorRT-LLM", "tensorrt_llm/commands/serve.py"],
        "trtllm",
    ),
    "llm-d.md": (
        ["--otlp-traces-endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT", "tracing.otlpEndpoint"],
        ["llm-d/llm-d", "docs/monitoring/tracing/README.md"],
        "vllm",
    ),
    "dynamo.md": (
        ["OTEL_EXPORT_ENABLED", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"],
        ["ai-dynamo/dynamo", "docs/observability/logging.md"],
        "dynamo",
    ),
    "otel.md": (
        ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"],
        ["open-telemetry/opentelemetry-specification", "specification/protocol/exporter.md"],
        None,
    ),
}


def page(name: str) -> str:
    return (PAGES / name).read_text(encoding="utf-8")


def blocks(text: str) -> list[tuple[str, str]]:
    return BLOCK.findall(text)


def sidecar_invocations(text: str) -> list[tuple[list[str], list[str]]]:
    """(group flags, sidecar flags) of every ``infersight … sidecar …`` the page shows, shell
    lines and the ``args:`` lists of YAML alike."""
    found = []
    for language, body in blocks(text):
        if language == "sh":
            joined = body.replace("\\\n", " ")
            for line in joined.splitlines():
                words = shlex.split(
                    line.split(" #", 1)[0].rstrip("&").strip() or "#", comments=True
                )
                if "infersight" in words and "sidecar" in words:
                    start, at = words.index("infersight"), words.index("sidecar")
                    group = [w for w in words[start + 1 : at] if w.startswith("--")]
                    own = [w for w in words[at + 1 :] if w.startswith("--")]
                    found.append((group, own))
        elif "- sidecar" in body:
            items = re.findall(r"(?m)^\s*- (--[a-z-]+)", body)
            found.append(([], items))
    return found


def option_names(command: click.Command) -> set[str]:
    return {opt for param in command.params for opt in param.opts}


def test_there_is_a_page_per_engine_and_the_readmes_link_them() -> None:
    index = page("README.md")
    for name in ENGINES:
        assert (PAGES / name).is_file(), name
        assert f"]({name})" in index, name
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Connect your server", 1)[1].split("\n## ", 1)[0]
    assert "docs/connect/" in section
    for name in ENGINES:
        assert f"docs/connect/{name}" in section, name


@pytest.mark.parametrize("name", ["README.md", *ENGINES])
def test_every_sidecar_flag_a_page_uses_exists(name: str) -> None:
    invocations = sidecar_invocations(page(name))
    if name not in ("README.md", "otel.md", "llm-d.md", "dynamo.md"):
        assert any("--scrape" in own for _, own in invocations), name
    assert invocations, f"{name} shows no sidecar"
    for group, own in invocations:
        flags = {flag.split("=", 1)[0] for flag in own}
        assert flags <= option_names(sidecar), flags - option_names(sidecar)
        assert {flag.split("=", 1)[0] for flag in group} <= option_names(cli)


def test_the_sidecar_listens_where_the_pages_send() -> None:
    defaults = {p.name: p.default for p in sidecar.params}
    assert defaults["otlp_grpc"] == "127.0.0.1:4317"
    assert defaults["otlp_http"] == "127.0.0.1:4318"


@pytest.mark.parametrize("name", ["README.md", *ENGINES])
def test_every_endpoint_is_the_sidecars_grpc_or_http_port(name: str) -> None:
    text = "\n".join(body for _, body in blocks(page(name)))
    urls = re.findall(r"https?://127\.0\.0\.1:(43\d\d)(/[\w/.]*)?", text)
    for port, path in urls:
        assert port in ("4317", "4318"), (port, path)
        # gRPC takes no path; OTLP/HTTP's traces are POSTed to /v1/traces, and the HTTP port
        # also serves the sidecar's /healthz and /metrics
        allowed = {""} if port == "4317" else {"/v1/traces", "/healthz", "/metrics"}
        assert path in allowed, (port, path)


@pytest.mark.parametrize("name", [n for n, (_, _, d) in ENGINES.items() if d])
def test_each_scrape_url_has_the_path_the_registry_expects(name: str) -> None:
    declaration = next(d for d in REGISTRY if d.name == ENGINES[name][2])
    expected = {dialect.path for dialect in declaration.dialects}
    scrapes = re.findall(r"--scrape[= ](\S+)", page(name))
    assert scrapes, name
    for url in scrapes:
        assert urlparse(url).path in expected, (url, expected)


@pytest.mark.parametrize("name", list(ENGINES))
def test_each_page_gives_the_engines_flags_and_where_they_were_looked_up(name: str) -> None:
    flags, source, _ = ENGINES[name]
    text = page(name)
    for flag in flags:
        assert flag in text, flag
    looked_up = text[text.index("Looked up in") if "Looked up in" in text else text.rindex("(") :]
    for item in source:
        assert f"`{item}`" in looked_up, item


def test_every_relative_link_resolves() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Connect your server", 1)[1].split("\n## ", 1)[0]
    sources = [(ROOT, section)] + [
        (PAGES, p.read_text(encoding="utf-8")) for p in PAGES.glob("*.md")
    ]
    for folder, text in sources:
        for target in re.findall(r"\]\(([^)#]+)\)", text):
            if "://" not in target:
                assert (folder / target).exists(), target


def _walkthrough() -> list[str]:
    text = page("README.md").split("## Try it", 1)[1]
    [(language, body)] = blocks(text)[:1]
    assert language == "sh"
    return [line for line in body.splitlines() if line.strip()]


def _consecutive_free_ports(count: int) -> int:
    while True:
        base = free_port()
        try:
            for offset in range(1, count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", base + offset))
        except OSError:
            continue
        return base


@pytest.mark.e2e
@pytest.mark.slow
def test_the_walkthrough_runs_as_written(tmp_path: Path) -> None:
    """The "Try it" commands, run as written in a fresh directory, end with the percentiles of
    the spans the sidecar received. Two liberties: each port moves to a free one (the sidecar's
    and the API's default ports are then given as flags), and each ``sleep N && curl URL``
    waits until the URL shows what the page says it shows, not N seconds."""
    engines = _consecutive_free_ports(4)  # the scenario's four simulated instances
    grpc, http, api = free_port(), free_port(), free_port()
    moved = {"8000": engines, "4317": grpc, "4318": http, "8080": api}
    extra = {
        "sidecar": ["--otlp-grpc", f"127.0.0.1:{grpc}", "--otlp-http", f"127.0.0.1:{http}"],
        "serve": ["--listen", f"127.0.0.1:{api}"],
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERSIGHT_")}
    executable = str(Path(sys.executable).parent / "infersight")
    running: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for written in _walkthrough():
            line = re.sub(
                r"127\.0\.0\.1:(8000|4317|4318|8080)", lambda m: f"127.0.0.1:{moved[m[1]]}", written
            )
            if line.startswith("sleep"):
                url = shlex.split(line.split("&&")[1])[-1]
                _wait_for(url, running, tmp_path)
                continue
            background = line.endswith("&")
            argv = shlex.split(line.rstrip("&").strip())
            assert argv[0] == "infersight", line
            argv = [executable, *argv[1:], *extra.get(argv[1], [])]
            if background:
                log = (tmp_path / f"{argv[1]}.log").open("wb")
                logs.append(log)
                running.append(
                    subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=log, stderr=log)
                )
            else:
                subprocess.run(argv, cwd=tmp_path, env=env, check=True, capture_output=True)
    finally:
        for process in running:
            process.terminate()
        for process in running:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for log in logs:
            log.close()


def _wait_for(url: str, running: list[subprocess.Popen[bytes]], folder: Path) -> None:
    def shown() -> bool:
        for process in running:
            if process.poll() is not None:
                role = str(process.args[1])  # type: ignore[index]
                log = (folder / f"{role}.log").read_text(errors="replace")[-3000:]
                raise AssertionError(f"{role} exited ({process.returncode}):\n{log}")
        try:
            body = httpx.get(url, timeout=10).json()
        except (httpx.TransportError, ValueError):
            return False
        if url.endswith("/healthz"):
            return body.get("shipping") == "ok" and body.get("last_shipped_at") is not None
        return sum(group["count"] for group in body.get("groups", [])) > 0

    until(shown, url)


@pytest.mark.e2e
@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_the_documented_token_header_reaches_a_sidecar_that_requires_a_token(
    protocol: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OpenTelemetry SDK given the header as the pages write it
    (``OTEL_EXPORTER_OTLP_TRACES_HEADERS=authorization=Bearer%20TOKEN``) is let in by a sidecar
    that listens beyond the loopback with ``--token-file``; without it, it is refused."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExportResult

    [written] = set(
        re.findall(r"OTEL_EXPORTER_OTLP_TRACES_HEADERS=(authorization=Bearer%20)", page("otel.md"))
    )
    token = "a-token-of-the-test-000000"
    (tmp_path / "token").write_text(token)
    grpc, http = free_port(), free_port()
    argv = [
        str(Path(sys.executable).parent / "infersight"),
        "--store",
        f"sqlite:///{tmp_path / 'store.db'}",
        "sidecar",
        "--gpu-source=none",
        f"--spool-dir={tmp_path / 'spool'}",
        f"--otlp-grpc=0.0.0.0:{grpc}",
        f"--otlp-http=0.0.0.0:{http}",
        f"--token-file={tmp_path / 'token'}",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INFERSIGHT_", "OTEL_"))}
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:

        def healthy() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{http}/healthz", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        until(healthy, "the sidecar's /healthz", process=process)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", protocol)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "true")
        if protocol == "grpc":
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{grpc}")
            make = GrpcExporter
        else:
            endpoint = f"http://127.0.0.1:{http}/v1/traces"
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
            make = HttpExporter
        span = TracerProvider().get_tracer("test").start_span("chat")
        span.set_attribute("gen_ai.operation.name", "chat")
        span.end()
        refused = make(timeout=30)
        assert refused.export([span]) is SpanExportResult.FAILURE
        refused.shutdown()
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", written + token)
        exporter = make(timeout=30)
        assert exporter.export([span]) is SpanExportResult.SUCCESS
        exporter.shutdown()
    finally:
        process.terminate()
        process.wait(timeout=60)
