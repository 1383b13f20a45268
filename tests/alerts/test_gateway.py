"""The client ↔ engine gap as a diagnosis signal: a gap that grows while the engine is flat
names the gateway / network; a flat gap or an engine that slowed does not (#18)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from infersight.alerts.diagnose import diagnose
from infersight.alerts.rules import Cause, load_rules
from infersight.core.signals import InstanceSignals, WindowSignals
from infersight.core.window import Window

T0 = datetime(2026, 3, 1, tzinfo=UTC)
REF = Window(T0, T0 + timedelta(minutes=5))
NOW = Window(T0 + timedelta(minutes=5), T0 + timedelta(minutes=10))
ENGINE = {"requests": 300.0, "request_rate": 1.0, "error_ratio": 0.0, "ttft_p50": 0.2,
          "ttft_p90": 0.3, "tpot_p50": 0.02, "tpot_p90": 0.03, "e2e_p90": 3.0}  # fmt: skip


def _signals(
    window: Window, gap: float, engine: float = 1.0, pairs: float = 200.0
) -> WindowSignals:
    values = {k: v * engine if k.endswith(("_p50", "_p90")) else v for k, v in ENGINE.items()}
    values.update(
        client_pairs=pairs,
        client_ttft_p90=values["ttft_p90"] + gap,
        client_e2e_p90=values["e2e_p90"] + gap,
        gap_ttft_p50=gap * 0.8,
        gap_ttft_p90=gap,
        gap_e2e_p50=gap * 0.8,
        gap_e2e_p90=gap,
    )
    return WindowSignals(window, (InstanceSignals("vllm-8b-0", "llama-8b", values),))


def test_a_growing_gap_with_the_engine_flat_is_the_gateway_with_its_evidence() -> None:
    result = diagnose(_signals(NOW, 1.0), _signals(REF, 0.02), load_rules())
    assert result.cause is Cause.GATEWAY_NETWORK
    shown = {e.signal: e for e in result.evidence}
    assert shown["gap_ttft_p90"].current == 1.0
    assert shown["gap_ttft_p90"].baseline == 0.02
    assert shown["client_pairs"].current == 200
    assert shown["client_pairs"].baseline == 200
    assert shown["ttft_p90"].ratio == 1.0
    assert shown["tpot_p90"].ratio == 1.0
    assert "client_ttft_p90" in {e.signal for e in result.symptoms}


def test_a_flat_gap_names_no_gateway() -> None:
    result = diagnose(_signals(NOW, 0.02), _signals(REF, 0.02), load_rules())
    assert Cause.GATEWAY_NETWORK not in result.ranked


def test_a_slower_engine_is_the_engine_not_the_gateway() -> None:
    result = diagnose(_signals(NOW, 1.0, engine=2.0), _signals(REF, 0.02), load_rules())
    assert Cause.GATEWAY_NETWORK not in result.ranked
    assert result.cause is not Cause.UNKNOWN or result.symptoms


def test_a_thin_sample_of_joined_calls_does_not_fire() -> None:
    now, ref = _signals(NOW, 1.0, pairs=200.0), _signals(REF, 0.02, pairs=5.0)
    assert Cause.GATEWAY_NETWORK not in diagnose(now, ref, load_rules()).ranked
    now, ref = _signals(NOW, 1.0, pairs=5.0), _signals(REF, 0.02, pairs=200.0)
    assert Cause.GATEWAY_NETWORK not in diagnose(now, ref, load_rules()).ranked
