"""The client ↔ engine gap: what a caller waited beyond what the engine reports.

A client record (``core.client``) whose caller propagated its trace context shares its trace id
with the server's record of the same call. ``join`` pairs them; the **gap** of a pair is the
client's value minus the server's, for TTFT and for end to end time: the network, a gateway,
the client's own queueing and its reading of the stream — everything the engine cannot see.
Both durations are measured each on its own host's clock, so clock skew between the hosts
does not enter a gap.

Pairing within a trace: one client call and one server record are a pair whatever their
timestamps say (the hosts' clocks may disagree; the reader looks a server record up within
minutes of its call, ``storage.client_reads.SERVER_MARGIN``). A trace with several calls (an
agent's loop under one root span) pairs each call, in start order, with the unpaired server
record of the same model (``core.model_names``) that started nearest to it, within the
call's own span widened by ``SKEW_S``; a call with none is unjoined.

``gap_report`` groups calls by model (canonical) and tenant: counts of joined and unjoined
calls, and exact quantiles of each gap (its input is bounded by the reader: a gap may be
negative, which the store's sketches do not hold).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from infersight.core.model_names import ModelAliases
from infersight.core.quantiles import exact_quantiles

#: Seconds a server record may start before its call (or end after it) and still be paired
#: inside a trace with several calls: clocks of two hosts rarely disagree by more.
SKEW_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a call as the join reads it (a client record or a server record)."""

    trace_id: str
    span_id: str
    start: datetime
    model: str
    tenant: str
    ttft_s: float | None
    e2e_s: float | None
    #: The server's labels (a client's are "").
    instance: str = ""
    priority: str = ""

    def label(self, name: str) -> str:
        """``model``, ``instance``, ``tenant`` or ``priority``."""
        value: str = getattr(self, name)
        return value


@dataclass(frozen=True, slots=True)
class Pair:
    """A client call and the server record it was joined to (``None``: unjoined)."""

    client: Side
    server: Side | None

    @property
    def ttft_gap_s(self) -> float | None:
        if self.server is None or self.client.ttft_s is None or self.server.ttft_s is None:
            return None
        return self.client.ttft_s - self.server.ttft_s

    @property
    def e2e_gap_s(self) -> float | None:
        if self.server is None or self.client.e2e_s is None or self.server.e2e_s is None:
            return None
        return self.client.e2e_s - self.server.e2e_s


def join(clients: Iterable[Side], servers: Iterable[Side], aliases: ModelAliases) -> list[Pair]:
    """Every client call, paired with its server record where one is found (module doc)."""
    by_trace: dict[str, list[Side]] = defaultdict(list)
    for server in servers:
        by_trace[server.trace_id].append(server)
    calls: dict[str, list[Side]] = defaultdict(list)
    for client in clients:
        calls[client.trace_id].append(client)
    pairs: list[Pair] = []
    for trace_id, group in calls.items():
        candidates = by_trace.get(trace_id, [])
        if len(group) == 1 and len(candidates) == 1:
            pairs.append(Pair(group[0], candidates[0]))
            continue
        free = sorted(candidates, key=lambda s: s.start)
        for client in sorted(group, key=lambda c: c.start):
            match = _nearest(client, free, aliases)
            if match is not None:
                free.remove(match)
            pairs.append(Pair(client, match))
    return pairs


def _nearest(client: Side, free: Sequence[Side], aliases: ModelAliases) -> Side | None:
    skew = timedelta(seconds=SKEW_S)
    low = client.start - skew
    high = client.start + timedelta(seconds=client.e2e_s or 0.0) + skew
    model = aliases.canonical(client.model)
    best: Side | None = None
    for server in free:
        if not low <= server.start <= high:
            continue
        if model and server.model and aliases.canonical(server.model) != model:
            continue
        if best is None or abs(server.start - client.start) < abs(best.start - client.start):
            best = server
    return best


@dataclass(frozen=True, slots=True)
class Distribution:
    """Quantiles of one gap over a group's joined calls that carry it."""

    count: int
    quantiles: dict[float, float] = field(default_factory=dict)
    mean: float | None = None


@dataclass(frozen=True, slots=True)
class GapGroup:
    model: str
    tenant: str
    calls: int
    joined: int
    unjoined: int
    ttft_gap: Distribution
    e2e_gap: Distribution
    client_ttft: Distribution
    server_ttft: Distribution
    client_e2e: Distribution
    server_e2e: Distribution


def _known(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def _distribution(values: list[float], quantiles: Sequence[float]) -> Distribution:
    if not values:
        return Distribution(0)
    return Distribution(len(values), exact_quantiles(values, quantiles), sum(values) / len(values))


def gap_report(
    pairs: Iterable[Pair], aliases: ModelAliases, quantiles: Sequence[float]
) -> list[GapGroup]:
    """Pairs grouped by canonical model and tenant (the client's, else the server's)."""
    groups: dict[tuple[str, str], list[Pair]] = defaultdict(list)
    for pair in pairs:
        server = pair.server
        model = pair.client.model or (server.model if server else "")
        tenant = pair.client.tenant or (server.tenant if server else "")
        groups[aliases.canonical(model), tenant].append(pair)
    out = []
    for (model, tenant), members in sorted(groups.items()):
        joined = [p for p in members if p.server is not None]
        servers = [p.server for p in joined if p.server is not None]
        out.append(
            GapGroup(
                model=model,
                tenant=tenant,
                calls=len(members),
                joined=len(joined),
                unjoined=len(members) - len(joined),
                ttft_gap=_distribution(_known(p.ttft_gap_s for p in joined), quantiles),
                e2e_gap=_distribution(_known(p.e2e_gap_s for p in joined), quantiles),
                client_ttft=_distribution(_known(p.client.ttft_s for p in members), quantiles),
                server_ttft=_distribution(_known(s.ttft_s for s in servers), quantiles),
                client_e2e=_distribution(_known(p.client.e2e_s for p in members), quantiles),
                server_e2e=_distribution(_known(s.e2e_s for s in servers), quantiles),
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class ClientStage:
    """The client ↔ engine stage of a breakdown group: the time the joined calls of the
    group's server records spent outside the engine, and its share of their client E2E."""

    calls: int
    gap_seconds_total: float
    client_seconds_total: float

    @property
    def share(self) -> float | None:
        if self.client_seconds_total <= 0:
            return None
        return max(0.0, self.gap_seconds_total) / self.client_seconds_total


def client_stages(
    pairs: Iterable[Pair],
    group_by: Sequence[str],
    pinned: Sequence[tuple[str, str]],
    tenants: frozenset[str] | None = None,
) -> dict[tuple[str, ...], ClientStage]:
    """Joined pairs grouped by their server record's labels (``group_by``), those whose server
    labels match ``pinned`` (and whose tenant is in ``tenants``, when given) only: the client
    stage each breakdown group gets."""
    sums: dict[tuple[str, ...], list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for pair in pairs:
        server = pair.server
        gap = pair.e2e_gap_s
        if server is None or gap is None or pair.client.e2e_s is None:
            continue
        if any(server.label(name) != value for name, value in pinned):
            continue
        if tenants is not None and server.label("tenant") not in tenants:
            continue
        acc = sums[tuple(server.label(name) for name in group_by)]
        acc[0] += 1
        acc[1] += gap
        acc[2] += pair.client.e2e_s
    return {key: ClientStage(int(n), gap, client) for key, (n, gap, client) in sums.items()}


__all__ = [
    "SKEW_S",
    "ClientStage",
    "Distribution",
    "GapGroup",
    "Pair",
    "Side",
    "client_stages",
    "gap_report",
    "join",
]


def client_signals(pairs: Sequence[Pair]) -> dict[str, float]:
    """The diagnosis's client signals of one instance from its joined pairs (gaps are client
    − server): how many pairs, the clients' TTFT and E2E P90, and the gaps' P50 and P90; a
    figure no pair reported is left out, a negative one reads as 0."""
    out: dict[str, float] = {"client_pairs": float(len(pairs))}
    wanted = (
        ("client_ttft_p90", [p.client.ttft_s for p in pairs], 0.9),
        ("client_e2e_p90", [p.client.e2e_s for p in pairs], 0.9),
        ("gap_ttft_p50", [p.ttft_gap_s for p in pairs], 0.5),
        ("gap_ttft_p90", [p.ttft_gap_s for p in pairs], 0.9),
        ("gap_e2e_p50", [p.e2e_gap_s for p in pairs], 0.5),
        ("gap_e2e_p90", [p.e2e_gap_s for p in pairs], 0.9),
    )
    for name, values, q in wanted:
        value = exact_quantiles(_known(values), [q]).get(q)
        if value is not None and math.isfinite(value):
            out[name] = max(0.0, value)
    return out
