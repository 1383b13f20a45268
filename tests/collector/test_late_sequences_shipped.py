"""Late parallel-sampling sequences (#30) through real processes: a sidecar shipping to central
ingest (``infersight sidecar --ship-to`` and ``infersight serve``) folds a sequence that comes
after its request was stored exactly as one writing to the store does, and a sidecar that was
``kill -9``-ed between the first sequence's shipment and its late sibling still recognises the
sibling (its memory of stored requests is kept in the spool). Spans in vLLM's shape, sent by
the OpenTelemetry SDK's OTLP/HTTP exporter; a reassembly window (0.5 s) shorter than the
siblings' spread; read back from SQLite and PostgreSQL. Each sequence is folded exactly once:
the late sibling exported again adds nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from infersight.collector.assembly import SequenceMemory
from infersight.collector.remote_sink import RemoteSink
from infersight.collector.spool import Spool, SpoolConfig
from infersight.core.errors import InvalidInput
from infersight.core.records import Engine, RequestRecord
from infersight.core.sequences import LateSequence
from infersight.core.wire import WireKind, decode_batch, encode_batch, frame
from tests.collector.harness import (
    ROOT,
    export_spans,
    running_sidecar,
    sidecar_args,
    sidecar_config,
    spawn_sidecar,
    wait_until,
)
from tests.collector.test_central_ingest import (
    GUARD_S,
    INGEST_TOKEN,
    Serve,
    _token_file,
    kill_sidecar,
    stop_sidecar,
)
from tests.collector.test_collector_late_sequences import (
    CrashAfterFold,
    _request,
    assert_one_request_of_both,
    stored,
    two_sequences,
)
from tests.peers import free_port

pytestmark = pytest.mark.e2e

SIDECAR = "from infersight.cli.commands_sidecar import sidecar; sidecar()"


@pytest.fixture
def central(store, tmp_path: Path) -> Iterator[Serve]:
    served = Serve(store.url, free_port(), tmp_path / "serve.log").start()
    try:
        yield served
    finally:
        served.stop()


def _args(spool: Path) -> list[str]:
    args = sidecar_args(spool, "vllm-0")
    args[args.index("--window") + 1] = "0.5"  # shorter than the siblings' spread (5 s)
    return args


def ship_to(api: Serve, spool: Path, token: Path) -> tuple[subprocess.Popen[str], str]:
    return spawn_sidecar(
        SIDECAR, [*_args(spool), "--ship-to", api.url, "--ship-token-file", str(token)]
    )


def to_store(store, spool: Path) -> tuple[subprocess.Popen[str], str]:
    return spawn_sidecar(SIDECAR, [*_args(spool), "--store", store.url])


def export(base: str, spans: list[ReadableSpan]) -> None:
    exporter = OTLPSpanExporter(endpoint=f"{base}/v1/traces")
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def metric(base: str, name: str) -> float:
    for line in httpx.get(f"{base}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def spool_empty(base: str) -> bool:
    return metric(base, "infersight_collector_spool_records") == 0


def first_stored(store) -> bool:
    rows = stored(store)
    return len(rows) == 1 and rows[0]["output_tokens"] == 40


def folded(store) -> bool:
    rows = stored(store)
    return len(rows) == 1 and rows[0]["output_tokens"] == 340


def test_a_late_sequence_shipped_through_central_ingest_folds_exactly_once(
    store, central: Serve, tmp_path: Path
) -> None:
    short, long = two_sequences()
    proc, base = ship_to(central, tmp_path / "spool", _token_file(tmp_path, INGEST_TOKEN))
    try:
        export(base, [short])
        assert wait_until(lambda: first_stored(store), timeout=GUARD_S)
        export(base, [long])  # its request was stored: the window was 0.5 s
        assert wait_until(lambda: folded(store), timeout=GUARD_S)
        assert wait_until(lambda: spool_empty(base), timeout=GUARD_S)
        assert metric(base, "infersight_collector_sequences_merged_total") == 1
        export(base, [long])  # the late sibling again: a duplicate, not added twice
        assert wait_until(
            lambda: metric(base, "infersight_collector_ship_duplicates_total") >= 1,
            timeout=GUARD_S,
        )
        assert wait_until(lambda: spool_empty(base), timeout=GUARD_S)
    finally:
        stop_sidecar(proc)
    assert_one_request_of_both(store)


@pytest.mark.parametrize("path", ["central", "direct"])
def test_a_sidecar_killed_between_a_request_and_its_late_sibling_still_folds_it(
    store, tmp_path: Path, path: str, request: pytest.FixtureRequest
) -> None:
    short, long = two_sequences()
    spool, token = tmp_path / "spool", _token_file(tmp_path, INGEST_TOKEN)

    api = request.getfixturevalue("central") if path == "central" else None

    def start() -> tuple[subprocess.Popen[str], str]:
        return ship_to(api, spool, token) if api is not None else to_store(store, spool)

    proc, base = start()
    try:
        export(base, [short])
        assert wait_until(lambda: first_stored(store), timeout=GUARD_S)
        assert wait_until(lambda: spool_empty(base), timeout=GUARD_S)  # shipped and settled
    finally:
        kill_sidecar(proc)
    proc, base = start()  # a new process: only the spool remembers the stored request
    try:
        export(base, [long])
        assert wait_until(lambda: folded(store), timeout=GUARD_S)
        assert wait_until(lambda: spool_empty(base), timeout=GUARD_S)
        export(base, [long])  # exported again: not added twice
        assert wait_until(
            lambda: metric(base, "infersight_collector_ship_duplicates_total") >= 1,
            timeout=GUARD_S,
        )
    finally:
        stop_sidecar(proc)
    assert_one_request_of_both(store)


@pytest.mark.parametrize("path", ["central", "direct"])
def test_the_stored_request_shipped_again_with_its_late_sibling_folds_the_sibling_once(
    store, tmp_path: Path, path: str, request: pytest.FixtureRequest
) -> None:
    """An exporter that sends the stored request's span again together with the late
    sibling (in one window, so the sidecar folds them together under the stored key): the
    sibling is folded, the stored part is not added again."""
    short, long = two_sequences()
    spool, token = tmp_path / "spool", _token_file(tmp_path, INGEST_TOKEN)
    api = request.getfixturevalue("central") if path == "central" else None
    proc, base = ship_to(api, spool, token) if api is not None else to_store(store, spool)
    try:
        export(base, [short])
        assert wait_until(lambda: first_stored(store), timeout=GUARD_S)
        assert wait_until(lambda: spool_empty(base), timeout=GUARD_S)
        export(base, [short, long])
        assert wait_until(lambda: folded(store), timeout=GUARD_S)
        assert wait_until(lambda: spool_empty(base), timeout=GUARD_S)
        export(base, [short, long])  # both again: nothing added
        assert wait_until(lambda: spool_empty(base), timeout=GUARD_S)
    finally:
        stop_sidecar(proc)
    assert_one_request_of_both(store)


def test_folded_is_answered_through_the_api_with_an_ingest_token_only(
    store, central: Serve, tmp_path: Path
) -> None:
    short, long = two_sequences()
    proc, base = ship_to(central, tmp_path / "spool", _token_file(tmp_path, INGEST_TOKEN))
    try:
        export(base, [short])
        assert wait_until(lambda: first_stored(store), timeout=GUARD_S)
        export(base, [long])
        assert wait_until(lambda: folded(store), timeout=GUARD_S)
    finally:
        stop_sidecar(proc)
    row = stored(store)[0]
    late = (row["trace_id"], f"{long.context.span_id:016x}")
    other = (row["trace_id"], row["span_id"])
    assert RemoteSink(central.url, INGEST_TOKEN).folded([late, other]) == {late}
    url = f"{central.url}/api/v1/ingest/folded"
    body = {"keys": [list(late)]}
    for token in ("read-token-0123456789", "wrong"):
        answer = httpx.post(url, json=body, headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code in (401, 403)
    bad = httpx.post(
        url,
        json={"keys": [["not-hex", "x"]]},
        headers={"Authorization": f"Bearer {INGEST_TOKEN}"},
    )
    assert bad.status_code == 400
    assert "trace_id" in bad.json()["error"]["message"]


def _late() -> LateSequence:
    start = datetime(2026, 12, 6, 9, 0, 0, 123456, tzinfo=UTC)
    record = RequestRecord(
        trace_id="a" * 32, span_id="b" * 16, start=start, instance="vllm-0", engine=Engine.VLLM,
        model="m", ttft_s=0.25, e2e_s=6.0, input_tokens=900, output_tokens=300,
    )  # fmt: skip
    return LateSequence((start, "a" * 32, "c" * 16), record, ("b" * 16, "d" * 16))


def test_late_sequences_round_trip_the_wire_and_malformed_ones_are_refused() -> None:
    fold = _late()
    kind, items = decode_batch(encode_batch(WireKind.SEQUENCE, [fold]))
    assert (kind, items) == (WireKind.SEQUENCE, [fold])
    body = encode_batch(WireKind.SEQUENCE, [fold])
    entry = json.loads(body[13:])
    entry["future_field"] = 1  # a later sidecar's addition is ignored
    cases = {
        "request's span among the members": {**entry, "members": ["c" * 16]},
        "no members": {**entry, "members": []},
        "another trace": {**entry, "request": [entry["request"][0], "e" * 32, "c" * 16]},
        "not a span id": {**entry, "members": ["b" * 16, "zz"]},
        "the record's own span missing": {**entry, "members": ["d" * 16]},
    }
    assert decode_batch(frame(WireKind.SEQUENCE, [json.dumps(entry).encode()]))[1] == [fold]
    for case, value in cases.items():
        body = frame(WireKind.SEQUENCE, [json.dumps(value).encode()])
        with pytest.raises(InvalidInput):
            decode_batch(body)
        assert case


def test_the_spool_keeps_the_memory_within_its_bounds(tmp_path: Path) -> None:
    """What one process remembered, the next reads back; expired or evicted groups are gone
    from the spool too."""
    now = [1000.0]
    spool = Spool(SpoolConfig(tmp_path / "spool", reserve_bytes=0))
    try:
        memory = SequenceMemory(capacity=2, keep_s=60.0, clock=lambda: now[0], store=spool)
        first = [_request(1, "req-1")]
        memory.remember([first[0].record], first)
        now[0] += 1
        more = [_request(2, "req-2"), _request(3, "req-3")]
        memory.remember([r.record for r in more], more)  # over capacity: req-1 goes
    finally:
        spool.close()
    spool = Spool(SpoolConfig(tmp_path / "spool", reserve_bytes=0))
    try:
        again = SequenceMemory(capacity=2, keep_s=60.0, clock=lambda: now[0], store=spool)
        assert len(again) == 2
        sibling = [_request(9, "req-2")]
        kept, late = again.split([sibling[0].record], sibling)
        assert kept == []
        assert late[0].request == (more[0].record.start, "a" * 32, f"{2:016x}")
        lost = [_request(8, "req-1")]
        assert again.split([lost[0].record], lost) == ([lost[0].record], [])
        # req-3's stored span again with a new sibling: only the sibling is late
        mixed = [_request(3, "req-3"), _request(7, "req-3", out=5)]
        kept, late = again.split([mixed[0].record], mixed)
        assert kept == []
        assert [(f.members, f.record.output_tokens) for f in late] == [((f"{7:016x}",), 5)]
        now[0] += 61  # past keep_s: a new process remembers nothing
        assert len(SequenceMemory(capacity=2, keep_s=60.0, clock=lambda: now[0], store=spool)) == 0
    finally:
        spool.close()


#: The last commit whose API did not fold late sequences (the release before the fold through
#: central ingest): a sidecar must keep working against it.
OLDER_API = "7f1d684~1"


class OlderServe(Serve):
    """``infersight serve`` from ``OLDER_API``'s source (``git archive``), ``--no-migrate``."""

    source: Path

    def start(self) -> OlderServe:
        env = {
            **os.environ,
            "PYTHONPATH": str(self.source),
            "INFERSIGHT_DATABASE_URL": self.store_url,
            "INFERSIGHT_RUN_JOBS": "false",
            "INFERSIGHT_API_TOKENS": f"ingest:{INGEST_TOKEN}",
        }
        code = (
            "import infersight, sys; assert infersight.__file__.startswith(sys.argv[1]); "
            "from infersight.cli.commands_serve import serve; "
            f"serve(['--listen', '127.0.0.1:{self.port}', '--no-migrate'])"
        )
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code, str(self.source)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.source,
            )
        assert wait_until(self._answers, timeout=GUARD_S), self.log.read_text(errors="replace")
        return self


@pytest.fixture
def older(store, tmp_path: Path) -> Iterator[Serve]:
    source = tmp_path / "older"
    source.mkdir()
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", OLDER_API, "infersight"],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the older API's source needs this repository's git history")
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    served = OlderServe(store.url, free_port(), tmp_path / "older.log")
    served.source = source
    served.start()
    try:
        yield served
    finally:
        served.stop()


def test_an_older_api_that_cannot_fold_gets_the_sequence_as_a_request_of_its_own(
    store, older: Serve, tmp_path: Path
) -> None:
    """The older API refuses the new batch kind (400, named) and has no ``/folded`` (404):
    the sidecar stores the late sequence as a request of its own, as it did before the fold,
    loses nothing and is not stuck; the same sequence again is stored once."""
    short, long = two_sequences()
    proc, base = ship_to(older, tmp_path / "spool", _token_file(tmp_path, INGEST_TOKEN))
    try:
        export(base, [short])
        assert wait_until(lambda: first_stored(store), timeout=GUARD_S)
        export(base, [long])
        assert wait_until(lambda: len(stored(store)) == 2, timeout=GUARD_S)
        assert wait_until(lambda: spool_empty(base), timeout=GUARD_S)
        refused = 'infersight_collector_ship_errors_total{reason="fold_refused"}'
        assert metric(base, refused) == 1
        export(base, [long])
        assert wait_until(lambda: spool_empty(base), timeout=GUARD_S)
        assert RemoteSink(older.url, INGEST_TOKEN).folded([("a" * 32, "b" * 16)]) == set()
    finally:
        stop_sidecar(proc)
    assert sorted(r["output_tokens"] for r in stored(store)) == [40, 300]


def test_a_fold_through_central_ingest_replayed_after_a_crash_is_not_stored_again(
    store, central: Serve, tmp_path: Path
) -> None:
    """The API folded the sequence but the sidecar died before clearing it from its spool
    (``CrashAfterFold``): the restarted sidecar asks the API (``/folded``) and ships nothing
    of it again."""
    short, long = two_sequences()
    spool = tmp_path / "spool"
    config = sidecar_config("vllm-0", spool, window_s=0.5, model="llama-8b")
    remote = RemoteSink(central.url, INGEST_TOKEN)
    with running_sidecar(CrashAfterFold(remote), config) as app:
        export_spans(app, [short])
        assert wait_until(lambda: first_stored(store), timeout=GUARD_S)
        export_spans(app, [long])
        assert wait_until(lambda: folded(store), timeout=GUARD_S)
        assert wait_until(lambda: app.spool.stats()[0] >= 1, timeout=GUARD_S)
    assert_one_request_of_both(store)
    with running_sidecar(remote, config) as restarted:
        assert wait_until(lambda: restarted.spool.stats()[0] == 0, timeout=GUARD_S)
        # the API said it was folded: not even shipped again (a duplicate, had it been)
        assert restarted.metrics.value("infersight_collector_ship_duplicates_total") == 0
    assert_one_request_of_both(store)
