"""The container image (#33), built from the repository's Containerfile and run with podman:
one image, a non-root user, every role by its command. Its ``db upgrade`` migrates a fresh
PostgreSQL database, its ``serve`` and ``sidecar`` run against it on the host's network, real
OTel SDK exporters send spans shaped as vLLM's ``llm_request`` to the sidecar (OTLP/HTTP and
OTLP/gRPC, with its bearer token), and the API, asked with its read token, answers their
percentiles.

The base image is made from Debian's packages (no registry here) and cached under a tag named
after its recipe; see tests/deploy/podman.py."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.collector.harness import vllm_spans
from tests.conftest import fresh_database
from tests.deploy.podman import Podman, build_image, container, podman_env, require_podman, running
from tests.peers import free_port
from tests.waiting import until

#: The first test builds the image: minutes on a fresh machine (the base image and pip).
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]

READ_TOKEN = "read-token-of-the-image-test"
OTLP_TOKEN = "otlp-token-of-the-image-test"
TTFT = "gen_ai.latency.time_to_first_token"


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    require_podman()
    return Podman(podman_env(tmp_path_factory.mktemp("podman")))


@pytest.fixture(scope="module")
def image(podman: Podman) -> str:
    tag = build_image(podman)
    size = podman.run("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip()
    print(f"image {tag}: {int(size) / 1e6:.0f} MB")
    return tag


def test_the_image_runs_as_a_non_root_user_and_serves_every_role_by_its_command(
    podman: Podman, image: str
) -> None:
    [config] = json.loads(podman.run("image", "inspect", image).stdout)
    assert config["Config"]["User"] == "10001:10001"
    assert config["Config"]["Entrypoint"] == ["infersight"]
    # One container for every role's usage (each start costs seconds on a loaded host).
    script = "id; for role in sidecar serve 'db upgrade' simulate; do infersight $role --help; done"
    out = podman.run("run", "--rm", "--entrypoint", "sh", image, "-c", script).stdout
    assert out.startswith("uid=10001(infersight) gid=10001(infersight)")
    for role in ("sidecar", "serve", "db upgrade", "simulate"):
        assert f"Usage: infersight {role} [OPTIONS]" in out, out
    # The build's arguments and its secret stay in the build stage: the image keeps neither.
    history = podman.run("history", "--no-trunc", "--format", "{{.CreatedBy}}", image).stdout
    assert "PIP_INDEX_URL" not in history
    assert "pip-cert" not in history
    check = "test ! -e /run/secrets/pip-cert && test ! -e /root/.cache/pip && echo clean"
    assert podman.run("run", "--rm", "--entrypoint", "sh", image, "-c", check).stdout == "clean\n"


def spans_with_ttfts(ttfts: list[float]) -> list[ReadableSpan]:
    """One vLLM ``llm_request`` span per TTFT, made by the real SDK."""
    return [span for ttft in ttfts for span in vllm_spans(1, **{TTFT: ttft})]


@pytest.fixture
def database() -> Iterator[str]:
    with fresh_database() as url:
        yield url


def test_spans_sent_to_the_images_sidecar_come_back_as_percentiles_from_its_api(
    podman: Podman, image: str, database: str, tmp_path: Path
) -> None:
    # Secrets as files mounted read-only, as a Secret or a systemd credential would be.
    api_tokens = tmp_path / "api-tokens"
    api_tokens.write_text(f"read {READ_TOKEN}\n")
    otlp_token = tmp_path / "otlp-token"
    otlp_token.write_text(OTLP_TOKEN + "\n")
    for secret in (api_tokens, otlp_token):
        # readable by the image's user only, as docs/deploy.md has it (rootful podman: the
        # container's uid is the host's)
        if os.geteuid() == 0:
            os.chown(secret, 10001, 10001)
            secret.chmod(0o600)
        else:
            secret.chmod(0o644)
    store = ["-e", f"INFERSIGHT_DATABASE_URL={database}"]
    # Locked down as docs/deploy.md runs it: a read-only root file system, no capabilities,
    # no privilege gain; the sidecar writes its spool to a volume of its own.
    hardened = ["--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]

    migrated = podman.run("run", "--rm", "--network", "host", *store, image, "db", "upgrade")
    assert "is at revision" in migrated.stdout + migrated.stderr

    api_port, http_port, grpc_port = free_port(), free_port(), free_port()
    serve_options = [*hardened, *store, "-e", "INFERSIGHT_API_TOKENS_FILE=/run/secrets/api-tokens"]
    serve_options += ["-v", f"{api_tokens}:/run/secrets/api-tokens:ro"]
    serve = ["serve", "--listen", f"127.0.0.1:{api_port}", "--no-migrate"]
    sidecar = ["sidecar", "--otlp-http", f"127.0.0.1:{http_port}"]
    sidecar += ["--otlp-grpc", f"127.0.0.1:{grpc_port}", "--instance", "vllm-image-0"]
    sidecar += ["--model", "llama-3.1-8b", "--gpu-source", "none", "--window", "0"]
    sidecar += ["--token-file", "/run/secrets/otlp-token", "--spool-dir", "/spool"]
    sidecar_options = [*hardened, *store, "-v", f"{otlp_token}:/run/secrets/otlp-token:ro"]
    sidecar_options += ["--mount", "type=volume,destination=/spool"]
    api = f"http://127.0.0.1:{api_port}"
    collector = f"http://127.0.0.1:{http_port}"

    def answers(name: str, url: str) -> bool:
        if not running(podman, name):
            raise AssertionError(f"the container {name} stopped:\n{podman.logs(name)[-4000:]}")
        try:
            return httpx.get(url, timeout=10).status_code == 200
        except httpx.TransportError:
            return False

    with (
        container(podman, image, serve, serve_options) as api_name,
        container(podman, image, sidecar, sidecar_options) as sidecar_name,
    ):
        until(lambda: answers(api_name, f"{api}/healthz"), "the API answers /healthz")
        until(lambda: answers(sidecar_name, f"{collector}/healthz"), "the sidecar is up")

        ttfts = [round(0.26 + 0.01 * i, 2) for i in range(40)]
        by_http, by_grpc = spans_with_ttfts(ttfts[:20]), spans_with_ttfts(ttfts[20:])
        bearer = {"authorization": f"Bearer {OTLP_TOKEN}"}
        anonymous = HttpExporter(endpoint=f"{collector}/v1/traces", timeout=30)
        try:
            refused = anonymous.export(by_http)
        finally:
            anonymous.shutdown()
        assert refused is not SpanExportResult.SUCCESS, "the sidecar took spans without its token"
        http = HttpExporter(endpoint=f"{collector}/v1/traces", headers=bearer, timeout=30)
        grpc = GrpcExporter(
            endpoint=f"127.0.0.1:{grpc_port}", insecure=True, headers=bearer, timeout=30
        )
        try:
            assert http.export(by_http) is SpanExportResult.SUCCESS
            assert grpc.export(by_grpc) is SpanExportResult.SUCCESS
        finally:
            http.shutdown()
            grpc.shutdown()

        query = {"metric": "ttft", "quantiles": "0.5,0.9,0.99", "method": "exact"}
        assert httpx.get(f"{api}/api/v1/latency", params=query, timeout=30).status_code == 401
        read = {"authorization": f"Bearer {READ_TOKEN}"}

        def latency() -> dict | None:
            answer = httpx.get(f"{api}/api/v1/latency", params=query, headers=read, timeout=30)
            assert answer.status_code == 200, answer.text
            body = answer.json()
            return body if sum(g["count"] for g in body["groups"]) == len(ttfts) else None

        body = until(latency, "the API counts every span sent to the sidecar")
    [group] = body["groups"]
    assert group["labels"].get("model", "llama-3.1-8b") == "llama-3.1-8b"
    for q, got in group["quantiles"].items():
        expected = float(np.quantile(ttfts, float(q)))
        assert got == pytest.approx(expected, abs=0.011), (q, got, expected)
