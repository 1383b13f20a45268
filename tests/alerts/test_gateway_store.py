"""The gateway cause through the real path: server and client records written by the store's
writer, the window diagnosed by ``service.diagnosis.diagnose_window`` (#18)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np

from infersight.alerts.rules import Cause, load_rules
from infersight.core.client import ClientRecord, TtftSource
from infersight.core.model_names import ModelAliases
from infersight.core.query import Selector
from infersight.core.window import Window
from infersight.service.diagnosis import diagnose_window
from infersight.storage.writer import open_writer
from tests.factories import make_records

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
ALIASES = ModelAliases.parse("Llama-8B=llama-8b")


def _seed(store, late_gap: float) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(7)
    records = make_records(rng, T0, 600, span=timedelta(minutes=10), models=("llama-8b",),
                           instances=("gpu-0",), tenants=("acme",), error_rate=0.0)  # fmt: skip
    calls = []
    for r in records:
        gap = late_gap if r.start >= T0 + timedelta(minutes=5) else 0.02
        gap *= float(rng.uniform(0.8, 1.2))
        calls.append(
            ClientRecord(
                r.trace_id,
                f"{int(rng.integers(1, 2**62)):016x}",
                r.start - timedelta(milliseconds=5),
                model="Llama-8B",
                tenant="acme",
                ttft_source=TtftSource.EVENT,
                ttft_s=(r.ttft_s or 0.0) + gap,
                e2e_s=(r.e2e_s or 0.0) + gap,
            )
        )
    writer = open_writer(store.engine)
    writer.write_requests([replace(r) for r in records])
    writer.write_client_requests(calls)  # type: ignore[attr-defined]


def _diagnose(store):  # type: ignore[no-untyped-def]
    now = Window(T0 + timedelta(minutes=5), T0 + timedelta(minutes=10))
    ref = Window(T0, T0 + timedelta(minutes=5))
    return diagnose_window(store.sql, now, Selector(), load_rules(), ref, ALIASES)


def test_a_gateway_delay_is_named_with_the_gap_as_evidence(store) -> None:  # type: ignore[no-untyped-def]
    _seed(store, late_gap=2.0)
    result = _diagnose(store)
    assert result.cause is Cause.GATEWAY_NETWORK
    shown = {e.signal: e for e in result.evidence}
    assert shown["gap_ttft_p90"].current > 1.5
    assert shown["gap_ttft_p90"].baseline < 0.05
    assert shown["client_pairs"].current > 200
    assert shown["client_pairs"].baseline > 200


def test_a_flat_gap_names_no_gateway(store) -> None:  # type: ignore[no-untyped-def]
    _seed(store, late_gap=0.02)
    assert Cause.GATEWAY_NETWORK not in _diagnose(store).ranked
