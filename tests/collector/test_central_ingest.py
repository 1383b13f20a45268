"""Sidecar → central ingest → store, with real processes: ``infersight sidecar --ship-to`` and
``infersight serve``, SDK-shaped spans over OTLP/HTTP, both stores. Every acknowledged span
lands exactly once, through ``kill -9`` of either side; a token that may not ingest stores
nothing, and the sidecar's ``/healthz`` says why."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import numpy as np
import pytest
from sqlalchemy import func, select

from infersight.collector.remote_sink import RemoteSink
from infersight.core.errors import ConfigurationError, Unavailable
from infersight.core.wire import WireKind, encode_entries
from infersight.storage.tables import requests
from tests.collector.harness import (
    Sender,
    post_spans,
    sidecar_args,
    span_key,
    spawn_sidecar,
    stored_keys,
    vllm_spans,
    wait_until,
)
from tests.factories import make_records
from tests.peers import free_port

pytestmark = pytest.mark.e2e

READ_TOKEN = "read-token-0123456789"
INGEST_TOKEN = "ingest-token-0123456789"
#: A guard against a broken run, not a budget: the sidecar's backoff reaches 30 s.
GUARD_S = 180.0
#: Inside the store's accepted window (the raw retention back from now).
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


@dataclass
class Serve:
    """``infersight serve`` as a process on a fixed port, restartable after ``kill -9``."""

    store_url: str
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Serve:
        env = {
            **os.environ,
            "INFERSIGHT_DATABASE_URL": self.store_url,
            "INFERSIGHT_RUN_JOBS": "false",
            "INFERSIGHT_API_TOKENS": f"read:{READ_TOKEN},ingest:{INGEST_TOKEN}",
        }
        code = (
            "from infersight.cli.commands_serve import serve; "
            f"serve(['--listen', '127.0.0.1:{self.port}'])"
        )
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        assert wait_until(self._answers, timeout=GUARD_S), self.log.read_text(errors="replace")
        return self

    def _answers(self) -> bool:
        assert self.process is not None
        assert self.process.poll() is None, self.log.read_text(errors="replace")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def api(store, tmp_path: Path) -> Iterator[Serve]:
    served = Serve(store.url, free_port(), tmp_path / "serve.log").start()
    try:
        yield served
    finally:
        served.stop()


def _token_file(tmp_path: Path, token: str) -> Path:
    path = tmp_path / f"token-{token[:4]}"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


def start_sidecar(api: Serve, spool: Path, token_file: Path) -> tuple[subprocess.Popen[str], str]:
    code = "from infersight.cli.commands_sidecar import sidecar; sidecar()"
    args = [*sidecar_args(spool, "e2e"), "--ship-to", api.url, "--ship-token-file", str(token_file)]
    return spawn_sidecar(code, args)


def stop_sidecar(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return out


def kill_sidecar(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.stdout is not None
    proc.stdout.close()


def assert_exactly_once(store, acked: list[tuple[str, str]]) -> None:
    """Every acknowledged span is stored, and no row is stored twice."""
    assert wait_until(lambda: set(acked) <= set(stored_keys(store.engine)), timeout=GUARD_S)
    keys = stored_keys(store.engine)
    assert len(keys) == len(set(keys))
    with store.engine.connect() as c:
        assert c.execute(select(func.count()).select_from(requests)).scalar_one() == len(set(keys))


def test_spans_shipped_through_central_ingest_read_back_exactly(
    store, api: Serve, tmp_path: Path
) -> None:
    proc, base = start_sidecar(api, tmp_path / "spool", _token_file(tmp_path, INGEST_TOKEN))
    try:
        spans = vllm_spans(25)
        assert post_spans(base, spans, timeout=30).status_code == 200
        expected = {span_key(s) for s in spans}
        assert wait_until(lambda: set(stored_keys(store.engine)) == expected, timeout=GUARD_S)
        with store.engine.connect() as c:
            rows = c.execute(select(requests.c.span_id, requests.c.input_tokens, requests.c.engine))
            stored = {(row.span_id, row.input_tokens, row.engine) for row in rows}
        assert stored == {
            (f"{s.context.span_id:016x}", 100 + i, "vllm") for i, s in enumerate(spans)
        }
    finally:
        stop_sidecar(proc)


def test_kill_9_of_the_api_mid_ship_loses_and_duplicates_nothing(
    store, api: Serve, tmp_path: Path
) -> None:
    proc, base = start_sidecar(api, tmp_path / "spool", _token_file(tmp_path, INGEST_TOKEN))
    try:
        with Sender(f"{base}/v1/traces", pause_s=0.01) as sender:
            assert wait_until(lambda: len(stored_keys(store.engine)) >= 100, timeout=GUARD_S)
            api.kill()  # mid-ship: the sidecar keeps acknowledging into its spool
            killed_at = len(sender.acked)
            assert wait_until(sender.more_than(killed_at + 200), timeout=GUARD_S)
            api.start()
            restarted_at = len(sender.acked)
            assert wait_until(sender.more_than(restarted_at + 100), timeout=GUARD_S)
        assert_exactly_once(store, sender.acked)
    finally:
        stop_sidecar(proc)


def test_kill_9_of_the_sidecar_mid_ship_loses_and_duplicates_nothing(
    store, api: Serve, tmp_path: Path
) -> None:
    spool, token = tmp_path / "spool", _token_file(tmp_path, INGEST_TOKEN)
    proc, base = start_sidecar(api, spool, token)
    sender = Sender(f"{base}/v1/traces", threads=2, pause_s=0.0, stop_on_error=True).start()
    try:
        assert wait_until(lambda: len(sender.acked) >= 400, timeout=GUARD_S)
        assert wait_until(lambda: len(stored_keys(store.engine)) > 0, timeout=GUARD_S)
    finally:
        kill_sidecar(proc)
        sender.stop()
    restarted, _ = start_sidecar(api, spool, token)
    try:
        assert_exactly_once(store, sender.acked)
    finally:
        stop_sidecar(restarted)


def test_a_token_that_may_not_ingest_stores_nothing_and_health_says_why(
    store, api: Serve, tmp_path: Path
) -> None:
    proc, base = start_sidecar(api, tmp_path / "spool", _token_file(tmp_path, READ_TOKEN))
    try:
        assert post_spans(base, vllm_spans(5), timeout=30).status_code == 200

        def refused() -> bool:
            return "configuration error" in httpx.get(f"{base}/healthz", timeout=10).text

        assert wait_until(refused, timeout=GUARD_S)
        health = httpx.get(f"{base}/healthz", timeout=10)
        assert health.json()["status"].startswith("degraded: cannot ship")
        assert "403" in health.text
        assert READ_TOKEN not in health.text
        assert stored_keys(store.engine) == []
    finally:
        out = stop_sidecar(proc)
    assert READ_TOKEN not in out


def test_ship_to_is_exclusive_with_a_store_and_needs_a_token(tmp_path: Path) -> None:
    code = "from infersight.cli.commands_sidecar import sidecar; sidecar()"
    base = [sys.executable, "-c", code, *sidecar_args(tmp_path / "spool", "e2e")]
    token = str(_token_file(tmp_path, INGEST_TOKEN))
    cases = {
        "needs --ship-token-file": ["--ship-to", "http://127.0.0.1:9"],
        "are exclusive": [
            "--ship-to",
            "http://127.0.0.1:9",
            "--ship-token-file",
            token,
            "--store",
            "sqlite:///x.db",
        ],
        "http:// or https://": ["--ship-to", "ftp://h", "--ship-token-file", token],
    }
    for words, args in cases.items():
        done = subprocess.run(
            [*base, *args], check=False, capture_output=True, text=True, timeout=120
        )
        assert done.returncode != 0, words
        assert words in done.stderr + done.stdout, (words, done.stderr)


def test_the_remote_sink_splits_to_the_body_limit_and_a_replay_stores_nothing_twice(
    store, api: Serve
) -> None:
    records = make_records(np.random.default_rng(3), T0, 400, span=timedelta(minutes=20))
    # Bodies of at most 8 KiB: the batch goes in many requests, each its own transaction.
    sink = RemoteSink(api.url, INGEST_TOKEN, max_body_bytes=8192)
    assert len(sink._bodies(WireKind.RECORD, encode_entries(WireKind.RECORD, records))) > 4
    first = sink.write_requests(records)
    assert (first.received, first.inserted, first.duplicates) == (400, 400, 0)
    again = sink.write_requests(records)  # as after an answer lost to a kill
    assert (again.received, again.inserted, again.duplicates) == (400, 0, 400)
    assert sorted(stored_keys(store.engine)) == sorted((r.trace_id, r.span_id) for r in records)
    sink.ping()


def test_the_remote_sink_maps_refusals_and_silence_onto_the_shipper_s_errors(api: Serve) -> None:
    with pytest.raises(Unavailable, match=r"configuration error.*401"):
        RemoteSink(api.url, "not-a-token-0123456789").ping()
    with pytest.raises(Unavailable, match=r"configuration error.*403"):
        RemoteSink(api.url, READ_TOKEN).ping()
    with pytest.raises(Unavailable, match="does not answer"):
        RemoteSink(f"http://127.0.0.1:{free_port()}", INGEST_TOKEN).ping()
    with socket.socket() as silent:  # accepts the connection, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        with pytest.raises(Unavailable, match="does not answer"):
            RemoteSink(f"http://127.0.0.1:{port}", INGEST_TOKEN, timeout_s=0.5).ping()
    with pytest.raises(ConfigurationError):
        RemoteSink("file:///etc/passwd", INGEST_TOKEN)
    assert INGEST_TOKEN not in repr(RemoteSink(api.url, INGEST_TOKEN))
