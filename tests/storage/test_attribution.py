"""Attribution from the trace, store side (#34): a request's tenant, team and workload come
from its trace's gateway or client span, whichever of the two reaches the store first, once per
request and dimension, its rollups moved with it; on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from infersight.core.attribution import Attribution
from infersight.core.client import ClientRecord
from infersight.core.records import Engine, RequestRecord, Role
from infersight.storage.tables import (
    request_parts,
    request_rollups,
    requests,
    trace_attributions,
)
from infersight.storage.writer import open_writer
from tests.conftest import Store

T0 = datetime(2026, 12, 7, 10, 0, 0, tzinfo=UTC)


def _trace(i: int) -> str:
    return f"{i + 1:032x}"


def _request(
    i: int, *, offset_s: float = 0.5, tenant: str = "", role: Role = Role.UNIFIED
) -> RequestRecord:
    return RequestRecord(
        trace_id=_trace(i), span_id=f"{i + 1:016x}", start=T0 + timedelta(seconds=i + offset_s),
        instance="vllm-0", engine=Engine.VLLM, model="llama-8b", tenant=tenant, role=role,
        ttft_s=0.1, tpot_s=0.01, e2e_s=1.0, prefill_s=0.05, decode_s=0.9,
        input_tokens=100, output_tokens=90,
    )  # fmt: skip


def _gateway(i: int, **dims: str) -> Attribution:
    return Attribution(
        _trace(i), f"{0xA000 + i:016x}", T0 + timedelta(seconds=i), 2.0, source="litellm", **dims
    )


def _labels(store: Store, table=requests) -> dict[str, tuple[str, str, str]]:
    c = table.c
    with store.engine.connect() as connection:
        rows = connection.execute(select(c.trace_id, c.tenant, c.team, c.workload))
        return {t: (tenant, team, workload) for t, tenant, team, workload in rows}


def _rolled(store: Store, resolution: str = "1m") -> Counter[tuple[str, str, str]]:
    """Requests per (tenant, team, workload) in the rollups of ``resolution``."""
    c = request_rollups.c
    with store.engine.connect() as connection:
        rows = connection.execute(
            select(c.tenant, c.team, c.workload, func.sum(c.requests))
            .where(c.resolution == resolution)
            .group_by(c.tenant, c.team, c.workload)
        )
        return Counter({(a, b, w): int(n) for a, b, w, n in rows if n})


def _raw(store: Store) -> Counter[tuple[str, str, str]]:
    return Counter(_labels(store).values())


def _consistent(store: Store) -> None:
    raw = _raw(store)
    for resolution in ("1m", "1h", "1d"):
        assert _rolled(store, resolution) == raw, resolution


def test_attribution_first_fills_the_requests_before_they_are_stored(store: Store) -> None:
    writer = open_writer(store.engine)
    gateway = [_gateway(i, tenant="acme", team="search", workload="chat") for i in range(3)]
    assert writer.write_attributions(gateway).inserted == 3
    writer.write_requests([_request(i) for i in range(4)])  # the 4th has no gateway span
    labels = _labels(store)
    assert labels[_trace(0)] == ("acme", "search", "chat")
    assert labels[_trace(3)] == ("", "", "")
    _consistent(store)
    assert _rolled(store)[("acme", "search", "chat")] == 3


def test_requests_first_are_filled_when_the_gateway_span_comes(store: Store) -> None:
    writer = open_writer(store.engine)
    writer.write_requests([_request(i) for i in range(5)])
    assert _rolled(store)[("", "", "")] == 5
    writer.write_attributions([_gateway(i, tenant="acme", team="search") for i in range(5)])
    assert set(_labels(store).values()) == {("acme", "search", "")}
    _consistent(store)
    # Replayed, nothing moves again.
    again = [_gateway(i, tenant="acme", team="search") for i in range(5)]
    result = writer.write_attributions(again)
    assert (result.inserted, result.duplicates) == (0, 5)
    writer.write_requests([_request(i) for i in range(5)])
    _consistent(store)
    assert _rolled(store) == Counter({("acme", "search", ""): 5})


def test_the_engines_own_tenant_wins_and_other_dimensions_are_filled(store: Store) -> None:
    writer = open_writer(store.engine)
    writer.write_requests([_request(0, tenant="engine-said")])
    writer.write_attributions([_gateway(0, tenant="gateway-said", workload="batch")])
    assert _labels(store)[_trace(0)] == ("engine-said", "", "batch")
    _consistent(store)


def test_spans_of_one_trace_merge_the_first_named_wins(store: Store) -> None:
    writer = open_writer(store.engine)
    writer.write_attributions([_gateway(0, tenant="acme")])
    later = Attribution(_trace(0), "b" * 16, T0, 3.0, tenant="other", team="ml", source="app")
    writer.write_attributions([later])
    writer.write_requests([_request(0)])
    assert _labels(store)[_trace(0)] == ("acme", "ml", "")
    _consistent(store)


def test_a_request_outside_its_traces_span_is_not_filled(store: Store) -> None:
    writer = open_writer(store.engine)
    late = _request(0, offset_s=2.0 + 61.0)  # after the span's end and the minute of skew
    writer.write_requests([late, _request(1)])
    writer.write_attributions([_gateway(0, tenant="acme"), _gateway(1, tenant="acme")])
    labels = _labels(store)
    assert labels[_trace(0)] == ("", "", "")
    assert labels[_trace(1)] == ("acme", "", "")
    _consistent(store)


def test_a_client_records_own_tenant_attributes_its_trace(store: Store) -> None:
    writer = open_writer(store.engine)
    writer.write_requests([_request(0)])
    client = ClientRecord(
        trace_id=_trace(0), span_id="c" * 16, start=T0, service="app", source="openllmetry",
        model="llama-8b", tenant="globex", e2e_s=3.0,
    )  # fmt: skip
    writer.write_client_requests([client])
    assert _labels(store)[_trace(0)] == ("globex", "", "")
    # The mapping's reading of the same span adds what the client record cannot carry.
    writer.write_attributions(
        [Attribution(_trace(0), "c" * 16, T0, 3.0, tenant="x", workload="app", source="sdk")]
    )
    assert _labels(store)[_trace(0)] == ("globex", "", "app")
    _consistent(store)


def test_a_client_tenant_with_a_control_character_attributes_nothing(store: Store) -> None:
    writer = open_writer(store.engine)
    writer.write_requests([_request(0)])
    client = ClientRecord(
        trace_id=_trace(0), span_id="c" * 16, start=T0, service="app", source="openllmetry",
        model="llama-8b", tenant="\x1b[31macme", e2e_s=3.0,
    )  # fmt: skip
    assert writer.write_client_requests([client]).inserted == 1
    assert _labels(store)[_trace(0)] == ("", "", "")
    with store.engine.connect() as connection:
        assert (
            connection.execute(select(func.count()).select_from(trace_attributions)).scalar() == 0
        )


def test_prefill_legs_are_attributed_too(store: Store) -> None:
    writer = open_writer(store.engine)
    writer.write_requests([_request(0, role=Role.PREFILL), _request(1, role=Role.PREFILL)])
    writer.write_attributions([_gateway(0, tenant="acme"), _gateway(1, team="ml")])
    assert _labels(store, request_parts) == {
        _trace(0): ("acme", "", ""),
        _trace(1): ("", "ml", ""),
    }
    assert _rolled(store) == Counter()  # legs are never rolled up


def test_concurrent_writers_attribute_every_request_once(store: Store) -> None:
    """Requests and their gateway spans written at the same time by two writers, in small
    interleaved batches: each request ends attributed, its rollups moved once."""
    n = 240
    writers = (open_writer(store.engine), open_writer(store.engine))
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def ship(index: int) -> None:
        try:
            start.wait()
            for batch in range(0, n, 8):
                ids = range(batch, batch + 8)
                if index == 0:
                    writers[0].write_requests([_request(i) for i in ids])
                else:
                    tenant = {0: "acme", 1: "globex", 2: "initech"}
                    writers[1].write_attributions(
                        [_gateway(i, tenant=tenant[i % 3], team=f"t{i % 2}") for i in ids]
                    )
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=ship, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    labels = _labels(store)
    assert len(labels) == n
    assert all(tenant and team for tenant, team, _ in labels.values()), [
        t for t, v in labels.items() if not v[0]
    ][:5]
    _consistent(store)
    assert sum(_rolled(store).values()) == n
