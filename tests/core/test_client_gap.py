"""Client records, model names across both sides, and the pairing behind the gap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from infersight.core.client import ClientRecord, TtftSource
from infersight.core.errors import InvalidInput, InvalidRecord
from infersight.core.gap import Side, gap_report, join
from infersight.core.model_names import ModelAliases

T0 = datetime(2026, 12, 3, 12, tzinfo=UTC)
TRACE = "ab" * 16
DEFAULT = ModelAliases()


def side(span: str, at_s: float, e2e: float, ttft: float | None = None, **kw: str) -> Side:
    return Side(
        kw.get("trace", TRACE),
        span,
        T0 + timedelta(seconds=at_s),
        kw.get("model", "m"),
        kw.get("tenant", ""),
        ttft,
        e2e,
    )


def test_the_default_rule_strips_the_org_and_ignores_case() -> None:
    assert DEFAULT.same("Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct")
    assert not DEFAULT.same("Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct")
    assert DEFAULT.canonical("") == ""


def test_an_alias_names_a_gateway_model_by_the_servers_name() -> None:
    aliases = ModelAliases.parse("chat-small = meta-llama/Llama-3.1-8B-Instruct\n# comment\n")
    assert aliases.same("Chat-Small", "meta-llama/Llama-3.1-8B-Instruct")
    assert aliases.canonical("other/chat-small") == "llama-3.1-8b-instruct"


@pytest.mark.parametrize("text", ["nonsense", "=x", "a=", "a=x, a=y"])
def test_a_bad_alias_table_is_refused_naming_the_entry(text: str) -> None:
    with pytest.raises(InvalidInput):
        ModelAliases.parse(text)


def test_a_client_record_needs_a_ttft_source_exactly_with_a_ttft() -> None:
    with pytest.raises(InvalidRecord):
        ClientRecord(TRACE, "cd" * 8, T0, ttft_s=0.2)
    with pytest.raises(InvalidRecord):
        ClientRecord(TRACE, "cd" * 8, T0, ttft_source=TtftSource.EVENT)
    record = ClientRecord(TRACE, "cd" * 8, T0, e2e_s=1.0, ttft_s=0.2, ttft_source="event")
    assert record.ttft_source is TtftSource.EVENT


def test_one_call_and_one_server_record_of_a_trace_pair_whatever_their_clocks_say() -> None:
    client = side("c1", 0.0, 2.0, 0.5)
    server = side("s1", 3600.0, 1.9, 0.42)  # an hour of clock skew between the hosts
    (pair,) = join([client], [server], DEFAULT)
    assert pair.server is server
    assert pair.e2e_gap_s == pytest.approx(0.1)
    assert pair.ttft_gap_s == pytest.approx(0.08)


def test_several_calls_in_a_trace_pair_each_with_the_server_record_it_enclosed() -> None:
    calls = [side("c1", 0.0, 1.0), side("c2", 1.5, 1.0)]
    servers = [side("s2", 1.52, 0.9), side("s1", 0.02, 0.95)]
    pairs = join(calls, servers, DEFAULT)
    assert {(p.client.span_id, p.server.span_id if p.server else None) for p in pairs} == {
        ("c1", "s1"),
        ("c2", "s2"),
    }


def test_a_call_without_a_server_record_of_its_model_is_unjoined() -> None:
    calls = [side("c1", 0.0, 1.0, model="a"), side("c2", 0.1, 1.0, model="b")]
    servers = [side("s1", 0.05, 0.9, model="org/A")]
    pairs = {p.client.span_id: p for p in join(calls, servers, DEFAULT)}
    assert pairs["c1"].server is not None
    assert pairs["c2"].server is None
    assert pairs["c2"].e2e_gap_s is None


def test_the_report_groups_by_canonical_model_and_counts_unjoined_calls() -> None:
    joined = join(
        [side("c1", 0.0, 2.0, 0.5, model="Llama"), side("c2", 0.0, 1.0, trace="cd" * 16)],
        [side("s1", 0.01, 1.5, 0.3, model="org/llama")],
        DEFAULT,
    )
    groups = {g.model: g for g in gap_report(joined, DEFAULT, (0.5,))}
    llama = groups["llama"]
    assert (llama.calls, llama.joined, llama.unjoined) == (1, 1, 0)
    assert llama.e2e_gap.quantiles[0.5] == pytest.approx(0.5)
    assert llama.ttft_gap.quantiles[0.5] == pytest.approx(0.2)
    other = groups["m"]
    assert (other.calls, other.joined, other.unjoined) == (1, 0, 1)
    assert other.e2e_gap.count == 0
    assert other.client_e2e.quantiles[0.5] == pytest.approx(1.0)


def test_the_client_stage_sums_the_gaps_under_the_server_records_labels() -> None:
    from infersight.core.gap import client_stages

    servers = [
        Side("aa" * 16, "s1", T0, "org/m", "t1", None, 1.0, "node-0"),
        Side("bb" * 16, "s2", T0, "org/m", "t2", None, 2.0, "node-1"),
    ]
    calls = [side("c1", 0.0, 1.25, trace="aa" * 16), side("c2", 0.0, 2.5, trace="bb" * 16)]
    pairs = join(calls, servers, DEFAULT)
    stages = client_stages(pairs, ("instance",), ())
    assert stages[("node-0",)].gap_seconds_total == pytest.approx(0.25)
    assert stages[("node-1",)].share == pytest.approx(0.5 / 2.5)
    pinned = client_stages(pairs, ("model",), (("tenant", "t1"),))
    assert pinned[("org/m",)].calls == 1
