"""The "connect your server" pages (``docs/connect/``) stay true where they can be checked here:
every flag they give ``infersight sidecar`` (or the group) exists in our command line, the
ports they send to are the sidecar's defaults (gRPC 4317 without a path, HTTP 4318 with
``/v1/traces``), each ``--scrape`` URL has the path the engine registry expects of that
engine's ``/metrics``, and each engine page gives the engine's tracing flags and names the file
of the engine's repository they were read from. The engines themselves (CUDA builds) do not
install here, so their flags are checked against the names recorded from their source, below,
not against their own argument parsers."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from urllib.parse import urlparse

import click
import pytest

from infersight.cli.commands_sidecar import sidecar
from infersight.cli.group import cli
from infersight.collector.engines import REGISTRY

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
        # gRPC takes no path; OTLP/HTTP's traces are POSTed to /v1/traces
        assert path == ("" if port == "4317" else "/v1/traces"), (port, path)


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
