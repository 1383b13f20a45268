"""deploy/compose/compose.yaml (#33), run by ``podman-compose`` (Debian's package) on the
image the image test builds: its migrations, its API, its simulated vLLM server and that
server's sidecar, on the compose file's own network, each reached by its service name. The
simulated engine's spans go to the sidecar (with the sidecar's token, from the environment as a
real vLLM reads it), the sidecar ships them, and the API answers their percentiles.

No registry is reachable here, so the compose file's ``postgres`` service (the official image)
is left out (``--no-deps``): its ``INFERSIGHT_DATABASE_URL`` names a fresh database of the local
PostgreSQL instead, reached from the containers through a forwarder on the host that accepts
only containers' connections."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.conftest import POSTGRES_ADMIN_URL, fresh_database
from tests.deploy.podman import Podman, build_image, podman_env, require_podman
from tests.peers import free_port
from tests.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]

COMPOSE = Path(__file__).resolve().parents[2] / "deploy" / "compose" / "compose.yaml"
READ_TOKEN = "read-token-of-the-compose-test"
#: Private ranges podman gives its networks; the forwarder refuses every other peer.
CONTAINER_NETWORKS = [ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("127.0.0.0/8")]


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    require_podman()
    if shutil.which("podman-compose") is None:
        reason = "podman-compose is not installed (Debian package: podman-compose)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return Podman(podman_env(tmp_path_factory.mktemp("podman")))


class Forwarder:
    """TCP from containers (any host address, container peers only) to the local PostgreSQL."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("0.0.0.0", 0))  # peers are checked
        self.port = self.listener.getsockname()[1]
        self.stopped = threading.Event()
        self.sockets: list[socket.socket] = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stopped.is_set():
            try:
                client, (peer, _) = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.sockets.append(client)
            if not any(ipaddress.ip_address(peer) in n for n in CONTAINER_NETWORKS):
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self.sockets.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                pump = threading.Thread(target=self._pump, args=(a, b), daemon=True)
                self.threads.append(pump)
                pump.start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        for thread in self.threads:
            thread.join(timeout=30)
        for s in self.sockets:
            s.close()


@pytest.fixture
def database_for_containers() -> Iterator[str]:
    """A fresh database's URL as the compose file's containers reach it."""
    admin = make_url(POSTGRES_ADMIN_URL)
    forwarder = Forwarder((admin.host or "127.0.0.1", admin.port or 5432))
    try:
        with fresh_database() as url:
            yield (
                make_url(url)
                .set(host="host.containers.internal", port=forwarder.port)
                .render_as_string(hide_password=False)
            )
    finally:
        forwarder.close()


def test_the_compose_files_engine_sidecar_and_api_run_and_answer_percentiles(
    podman: Podman, database_for_containers: str, tmp_path: Path
) -> None:
    image = build_image(podman)
    api_port, engine_port = free_port(), free_port()
    project = f"infersight-test-{os.getpid()}"
    env = {
        **podman.env,
        "INFERSIGHT_IMAGE": image,
        "INFERSIGHT_DATABASE_URL": database_for_containers,
        "POSTGRES_PASSWORD": "unused-the-postgres-service-is-not-started",
        "INFERSIGHT_READ_TOKEN": READ_TOKEN,
        "INFERSIGHT_ADMIN_TOKEN": "admin-token-of-the-compose-test",
        "INFERSIGHT_OTLP_TOKEN": "otlp-token-of-the-compose-test",
        "INFERSIGHT_API_PORT": str(api_port),
        "INFERSIGHT_ENGINE_PORT": str(engine_port),
    }
    compose = ["podman-compose", "-p", project, "-f", str(COMPOSE)]

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*compose, *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert not check or done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        return done

    # A value the file requires and .env lacks is named, not silently empty.
    missing = {k: v for k, v in env.items() if k != "INFERSIGHT_OTLP_TOKEN"}
    refused = subprocess.run(
        [*compose, "ps"], env=missing, capture_output=True, text=True, timeout=120, check=False
    )
    assert "set INFERSIGHT_OTLP_TOKEN in .env" in refused.stdout + refused.stderr

    try:
        run("up", "-d", "--no-build", "--no-deps", "migrate")
        migrate = f"{project}_migrate_1"
        exit_code = podman.run("wait", migrate, timeout=600).stdout.strip()
        assert exit_code == "0", podman.logs(migrate)
        run("up", "-d", "--no-build", "--no-deps", "api", "engine", "sidecar")
        api = f"http://127.0.0.1:{api_port}"
        read = {"authorization": f"Bearer {READ_TOKEN}"}

        def stored() -> int:
            try:
                answer = httpx.get(
                    f"{api}/api/v1/latency",
                    params={"metric": "ttft", "instance": "vllm-sim-0"},
                    headers=read,
                    timeout=30,
                )
            except httpx.TransportError:
                return 0
            if answer.status_code != 200:
                return 0
            return sum(g["count"] for g in answer.json()["groups"])

        until(lambda: stored() >= 10, "the engine's requests reach the API through the sidecar")
        # the engine answers OpenAI-compatible requests on its published port
        models = httpx.get(f"http://127.0.0.1:{engine_port}/v1/models", timeout=30)
        assert models.status_code == 200, models.text
        # and the sidecar scrapes the engine's /metrics by its service name: the server's
        # figures reach the store as vLLM's

        def scraped() -> bool:
            answer = httpx.get(
                f"{api}/api/v1/engines", params={"instance": "vllm-sim-0"}, headers=read, timeout=30
            )
            assert answer.status_code == 200, answer.text
            return any(s.get("dialect") == "vllm" for s in answer.json()["servers"])

        until(scraped, "the sidecar's scrapes of the engine reach the API")
    finally:
        logs = run("logs", check=False)
        print(logs.stdout[-8000:], logs.stderr[-2000:])
        run("down", "-v", check=False)
