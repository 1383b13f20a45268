"""Stage reassembly, the whole concept: how long the pieces of a trace wait for each other
(``Reassembly``: the window and the orphan TTL), which stage fragments belong to which request
and why the others belong to none (``assemble``), and how a request's own fragments fill its
stage timings (``merge_stages``). This module is pure: no IO.

A request's stages are the stage spans *below its own span* (its descendants through
``parent_span_id``) *in its own service* (resource ``service.name``). An application that
propagates its trace context (every OpenTelemetry-instrumented client does) puts its own
spans in the same trace: its prompt tokenisation, its work queue, its call through a gateway.
Their names look like stages, but they are the client's time, never the server's.

The one stage that comes from above the request is its gateway: the span directly in front
of it (its parent), of kind SERVER, named as a gateway; its duration minus the request's end
to end time is the gateway's own share (``merge_stages``).

Each fragment gets a verdict from the request spans and pieces known at the time:

* **merged** into the nearest request span above it, every span between them being in the
  request's service;
* refused **other_service**: a span on its way up is in another service than its own (a
  sibling service's span, or a downstream service the server called);
* refused **ancestor**: it lies above a request span (a client span enclosing the call);
* refused **not_descendant**: its parents, all known, lead to the trace's root (or round in a
  loop) without meeting a request span (a client's or a sibling's span);
* **waiting**: a parent on its way up is not known yet (a request span or a link still to
  come): it stays in the spool until a later request of its trace settles it, or it expires.

Where the pieces wait: the ingestor spools each request record with its place in the trace,
due at ``Reassembly.due_at`` (arrival + the window), and each stage fragment and link (a span
that is neither a request nor a stage) at once; the shipper, when records are due, reads
their traces' pieces, calls ``assemble``, deletes the records and the settled fragments, and
drops what was spooled before ``Reassembly.expired_before`` (the orphan TTL).

A span of the request's own service that hangs beside the request span rather than below it
(an HTTP-server span of the same process, say) is refused too: only descendants count.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final, NamedTuple, Protocol

from infersight.collector.mapping.base import PD_STAGES, STAGE_FIELDS, Link, Place, StageFragment
from infersight.collector.mapping.spans import KIND_SERVER
from infersight.core.errors import InvalidInput, InvalidRecord
from infersight.core.records import RequestRecord, Role
from infersight.core.sequences import LateSequence, merge_sequences

Piece = StageFragment | Link


@dataclass(frozen=True, slots=True)
class Reassembly:
    """How long the pieces of a trace are given to meet.

    A request record waits ``window_s`` after it arrives, so that the stage spans of its
    trace that come later or in other exports are merged before it ships; a trace piece that
    no request has settled is dropped ``orphan_ttl_s`` after it arrived.
    """

    window_s: float = 2.0
    orphan_ttl_s: float = 300.0

    def __post_init__(self) -> None:
        if self.window_s < 0:
            raise InvalidInput("the reassembly window must not be negative")

    def due_at(self, arrived_at: float) -> float:
        """When a request record that arrived at ``arrived_at`` is due to ship."""
        return arrived_at + self.window_s

    def expired_before(self, now: float) -> float:
        """Trace pieces that arrived before this, and are still unsettled, are dropped."""
        return now - self.orphan_ttl_s


class Refusal(StrEnum):
    """Why a stage fragment belongs to no request (the ``reason`` label of the counter)."""

    NOT_DESCENDANT = "not_descendant"
    ANCESTOR = "ancestor"
    OTHER_SERVICE = "other_service"


class Request(NamedTuple):
    """A request record due to ship, and its place in the trace (``None``: unknown)."""

    record: RequestRecord
    place: Place | None = None


@dataclass(slots=True)
class Assembly:
    """The records with their stages merged (in input order) and each piece's verdict by
    index into the pieces given: merged, refused (by reason); every other one waits."""

    records: list[RequestRecord]
    merged: list[int] = field(default_factory=list)
    refused: dict[Refusal, list[int]] = field(default_factory=dict)
    #: Sequence spans folded into another's record (parallel sampling, ``n`` > 1).
    sequences_merged: int = 0
    #: Decode records made the user's request with their P/D proxy's spans.
    disaggregated: int = 0


_MERGED: Final = "merged"
_WAITING: Final = "waiting"
_ROOT: Final = "root"


def assemble(
    requests: Sequence[Request],
    pieces: Sequence[Piece],
    adapters: Collection[str] = frozenset(),
) -> Assembly:
    """Decide every fragment of ``pieces`` against ``requests`` (any traces, any order);
    name the LoRA adapter of a record whose engine did not, from a caller's span above it
    that asked for one of ``adapters`` (``attribute_adapters``)."""
    traces: dict[str, _Trace] = {}
    for i, request in enumerate(requests):
        traces.setdefault(request.record.trace_id, _Trace()).add_request(i, request)
    for j, piece in enumerate(pieces):
        if piece.trace_id in traces:
            traces[piece.trace_id].add_piece(j, piece)
    owned: dict[int, list[StageFragment]] = {}
    out = Assembly(records=[])
    for trace in traces.values():
        trace.decide(requests, pieces, owned, out)
    for i, request in enumerate(requests):
        record = request.record
        # A replayed record is in the batch twice: each copy gets the stages (the first
        # copy is the one in the trace's map).
        first = traces[record.trace_id].nodes.get(record.span_id, (True, i))[1]
        fragments = owned.get(first)
        if fragments:
            place = request.place or Place()
            record = merge_stages(record, fragments, place.start_ns, place.end_ns)
        out.records.append(record)
    # One index of the pieces for both walks up from a record (several requests of a pass
    # share a trace; a piece is looked up by its trace and span id).
    by_span = {(p.trace_id, p.span_id): j for j, p in enumerate(pieces)}
    out.records = attribute_adapters(out.records, requests, pieces, adapters, by_span)
    out.records, used, out.disaggregated = fold_disaggregated(
        out.records, requests, pieces, by_span
    )
    out.merged.extend(used)
    out.records, out.sequences_merged = fold_sequences(out.records, requests)
    return out


# --- LoRA adapters named by the caller -----------------------------------------------------

#: How far above a request span a caller's span is looked for (a gateway, an SDK's span, …).
MAX_CALLER_HOPS: Final = 8


def attribute_adapters(
    records: list[RequestRecord],
    requests: Sequence[Request],
    pieces: Sequence[Piece],
    adapters: Collection[str],
    by_span: Mapping[tuple[str, str], int],
) -> list[RequestRecord]:
    """Records whose engine named no adapter, given the one a caller's span above them asked
    for (``Link.model``: a gateway routing by model name, an OpenAI SDK's client span), when
    that name is one of this instance's ``adapters`` — never any other name: a caller's alias
    for the base model is not an adapter. ``records[i]`` is ``requests[i]``'s."""
    if not adapters:
        return records
    out = list(records)
    for i, request in enumerate(requests):
        record, place = records[i], request.place
        if record.adapter or place is None:
            continue
        parent = place.parent_span_id
        for _ in range(MAX_CALLER_HOPS):
            at = by_span.get((record.trace_id, parent))
            if at is None:
                break
            piece = pieces[at]
            if isinstance(piece, Link) and piece.model in adapters:
                if piece.model != record.model:
                    out[i] = dataclasses.replace(record, adapter=piece.model)
                break
            parent = piece.parent_span_id
    return out


# --- disaggregated prefill/decode: one user request, two instances -----------------------


def fold_disaggregated(
    records: list[RequestRecord],
    requests: Sequence[Request],
    pieces: Sequence[Piece],
    by_span: Mapping[tuple[str, str], int],
) -> tuple[list[RequestRecord], list[int], int]:
    """The user's request from a decode instance's record and its P/D proxy's spans
    (``collector.mapping.pd_proxy``); ``records[i]`` is ``requests[i]``'s record, and stays
    in place. Also the indices of the proxy pieces used (settled), and how many records
    were made users' requests.

    A record whose parent is the proxy's decode leg is the user's request
    (``disaggregated_record``); the prefill leg is the decode leg's sibling or its parent
    (the concurrent-dispatch connectors start decode inside prefill's context), the proxy's
    request the nearest request piece above. Pieces not here yet are done without: a record
    whose proxy spans all come too late ships as the decode instance saw it."""
    pd = {
        j: piece
        for j, piece in enumerate(pieces)
        if isinstance(piece, StageFragment) and piece.stage in PD_STAGES
    }
    if not pd:
        return records, [], 0
    siblings: dict[tuple[str, str], int] = {}
    for j, piece in pd.items():
        if piece.stage == "pd_prefill":
            siblings.setdefault((piece.trace_id, piece.parent_span_id), j)
    used: set[int] = set()
    folded_count = 0
    out = list(records)
    for i, request in enumerate(requests):
        record, place = records[i], request.place
        legs = _proxy_legs(record.trace_id, place, by_span, siblings, pd)
        if place is None or not legs:
            continue
        folded = disaggregated_record(record, place, {pd[j].stage: pd[j] for j in legs})
        if folded is not None:
            out[i] = folded
            used.update(legs)
            folded_count += 1
    return out, sorted(used), folded_count


def _proxy_legs(
    trace_id: str,
    place: Place | None,
    by_span: Mapping[tuple[str, str], int],
    siblings: dict[tuple[str, str], int],
    pieces: dict[int, StageFragment],
) -> list[int]:
    """The proxy pieces of a record placed at ``place``: its decode leg (its parent; none:
    not disaggregated), the prefill leg (the decode leg's sibling or parent) and the proxy's
    request (the nearest request piece above), those known."""

    def proxy_piece(span_id: str) -> int | None:
        at = by_span.get((trace_id, span_id))
        return at if at in pieces else None

    leg_at = proxy_piece(place.parent_span_id) if place is not None else None
    if leg_at is None or pieces[leg_at].stage != "pd_decode":
        return []
    legs = [leg_at]
    prefill_at = siblings.get((trace_id, pieces[leg_at].parent_span_id))
    parent_at = proxy_piece(pieces[leg_at].parent_span_id)
    for _ in range(3):  # decode leg → (prefill leg →) the proxy's request
        if parent_at is None:
            break
        legs.append(parent_at)
        if pieces[parent_at].stage == "pd_request":
            break
        if pieces[parent_at].stage == "pd_prefill":
            prefill_at = parent_at if prefill_at is None else prefill_at
        parent_at = proxy_piece(pieces[parent_at].parent_span_id)
    if prefill_at is not None and prefill_at not in legs:
        legs.append(prefill_at)
    return legs


def disaggregated_record(
    record: RequestRecord, place: Place, legs: dict[str, StageFragment]
) -> RequestRecord | None:
    """The user's request: ``record`` (the decode instance's) seen through its proxy's spans
    ``legs`` (by P/D stage; the decode leg always, the others when known).

    It starts when the proxy received the request (else at its earliest known leg); its TTFT
    runs from there to the decode instance's first token, its end to end time to the later of
    the proxy's end and the decode instance's. ``route_s`` is the proxy's time before the
    prefill leg, ``prefill_s`` the prefill leg as the proxy saw it (the prefill instance's
    queue and prefill, and the network), ``kv_transfer_s`` the time from the prefill leg's end
    until the decode instance scheduled the request (its queue time: a decode instance holds
    a request while its KV cache arrives). The decode instance's TPOT, decode time and tokens
    are kept: its prompt tokens are the request's, counted once here (the prefill leg's
    record is a part, ``Role.PREFILL``). ``None`` when the result would be implausible."""
    start_ns = place.start_ns or int(record.start.timestamp() * 1e9)
    top, prefill = legs.get("pd_request"), legs.get("pd_prefill")
    known = [f for f in legs.values() if f.start_ns > 0]
    origin = top.start_ns if top is not None and top.start_ns > 0 else 0
    if not origin:
        origin = min([f.start_ns for f in known] + [start_ns])
    origin = min(origin, start_ns)
    own_end = start_ns + int((record.e2e_s or 0.0) * 1e9)
    end_ns = max([own_end] + [f.end_ns for f in known if f.end_ns > 0 and f.stage != "pd_prefill"])
    updates: dict[str, Any] = {
        "start": datetime.fromtimestamp(origin / 1e9, tz=UTC),
        "role": Role.DECODE,
        "e2e_s": (end_ns - origin) / 1e9,
        "queue_s": None,
    }
    if record.ttft_s is not None:
        updates["ttft_s"] = (start_ns - origin) / 1e9 + record.ttft_s
    if prefill is not None:
        updates["peer"] = prefill.detail
        if prefill.start_ns > 0 and prefill.end_ns >= prefill.start_ns:
            updates["route_s"] = max(0, prefill.start_ns - origin) / 1e9
            updates["prefill_s"] = (prefill.end_ns - prefill.start_ns) / 1e9
            gap = max(0, start_ns - prefill.end_ns) / 1e9
            updates["kv_transfer_s"] = gap + (record.queue_s or 0.0)
    try:
        return dataclasses.replace(record, **updates)
    except InvalidRecord:
        return None


# --- parallel sampling: one request, several sequence spans -----------------------------


def fold_sequences(
    records: list[RequestRecord], requests: Sequence[Request]
) -> tuple[list[RequestRecord], int]:
    """One record per user request: the spans of one request's parallel sequences (vLLM emits
    one ``llm_request`` span per child of an ``n`` > 1 request, all with the request's
    ``gen_ai.request.id`` and the same parent) are folded into one (``merge_sequences``).
    ``records[i]`` is ``requests[i]``'s record; the first sibling keeps the position."""
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i, request in enumerate(requests):
        place = request.place
        if place is not None and place.request_id:
            key = (request.record.trace_id, place.parent_span_id, place.request_id)
            groups.setdefault(key, []).append(i)
    folded: dict[int, RequestRecord] = {}
    dropped: set[int] = set()
    sequences = 0
    for members in groups.values():
        # A replayed span is in the batch twice: count each sequence once.
        unique = list({records[i].span_id: i for i in members}.values())
        if len(unique) < 2:
            continue
        merged = merge_sequences([records[i] for i in unique])
        if merged is None:
            continue  # implausible together: each sequence ships as it is, none is lost
        folded[members[0]] = merged
        dropped.update(members[1:])
        sequences += len(unique) - 1
    if not folded:
        return records, 0
    out = [folded.get(i, r) for i, r in enumerate(records) if i not in dropped]
    return out, sequences


#: A group remembered: (trace, parent span, request id), when, the stored request's key
#: (start, trace id, span id), and the span ids of the group that were stored (in that row,
#: or written in the same pass).
Remembered = tuple[tuple[str, str, str], float, tuple[datetime, str, str], tuple[str, ...]]


class GroupStore(Protocol):
    """Where ``SequenceMemory`` keeps its groups across restarts (``collector.spool``)."""

    def load_groups(self, since: float, limit: int) -> list[Remembered]:
        """The newest ``limit`` groups remembered at or after ``since``, oldest first: each
        (trace, parent span, request id), when it was remembered, its stored request and
        the span ids stored with it."""
        ...

    def save_groups(
        self,
        added: Sequence[Remembered],
        dropped: Sequence[tuple[str, str, str]],
        horizon: float,
    ) -> None:
        """Keep ``added``, forget ``dropped`` and what was remembered before ``horizon``;
        never raises for its own failure (the memory then lasts as long as the process)."""
        ...


class SequenceMemory:
    """The requests a sidecar stored lately, by their parallel-sampling group (trace,
    parent span, engine request id), so that a sequence coming after its request was stored
    is recognised as late and folded into the stored row (``split``) instead of being
    stored as a request of its own.

    Bounded: at most ``capacity`` groups, each kept ``keep_s`` (the oldest go first). A
    sequence later than that, or whose request was stored before the sidecar restarted, is
    stored as a request of its own, as it was before there was a fold. Per shipping pass it
    costs one pass over the requests (``split`` finds their groups, ``remember`` reuses them).

    With a ``store`` (the sidecar's spool: ``collector.spool.Spool``'s groups) the memory
    outlives the process: it is read back when made (what is younger than ``keep_s`` by
    ``clock``, which must then be wall-clock time, at most ``capacity``), and each
    ``remember`` writes the groups it adds and drops before the shipper deletes the entries
    it stored, so a sequence whose request was stored before a restart is still recognised.
    """

    def __init__(
        self,
        capacity: int = 32_768,
        keep_s: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
        store: GroupStore | None = None,
    ) -> None:
        self.capacity = capacity
        self.keep_s = keep_s
        self._clock = clock
        self._store = store
        self._stored: OrderedDict[
            tuple[str, str, str], tuple[float, tuple[datetime, str, str], frozenset[str]]
        ]
        self._stored = OrderedDict()
        if store is not None:
            for group, at, request, spans in store.load_groups(clock() - keep_s, capacity):
                self._stored[group] = (at, request, frozenset(spans))
        #: The last pass's requests and the group of each of their (trace, span) keys.
        self._last: tuple[Sequence[Request], dict[tuple[str, str], tuple[str, str, str]]] = (
            (),
            {},
        )

    def __len__(self) -> int:
        return len(self._stored)

    def _groups(self, requests: Sequence[Request]) -> dict[tuple[str, str], tuple[str, str, str]]:
        if self._last[0] is requests:
            return self._last[1]
        by_key: dict[tuple[str, str], tuple[str, str, str]] = {}
        for request in requests:
            place = request.place
            if place is not None and place.request_id:
                record = request.record
                trace = record.trace_id
                by_key[trace, record.span_id] = (trace, place.parent_span_id, place.request_id)
        self._last = (requests, by_key)
        return by_key

    def split(
        self, records: list[RequestRecord], requests: Sequence[Request]
    ) -> tuple[list[RequestRecord], list[LateSequence]]:
        """``records`` (assembled from ``requests``) as those to store and the late
        sequences of requests stored before (to fold into them).

        A record of a stored group whose spans were all stored before is a replay (kept: the
        store ignores its key). One that mixes spans stored before with new ones (the stored
        request shipped again, with a late sibling, in one window) is not kept: its new
        spans' own records, folded together, are the late sequence."""
        self._expire()
        stored = self._stored
        by_key = self._groups(requests)
        if not stored or not by_key:
            return records, []
        late_groups = {g for g in by_key.values() if g in stored}
        if not late_groups:
            return records, []
        members: dict[tuple[str, str, str], list[str]] = {}
        for (_, span), group in by_key.items():
            if group in late_groups:
                members.setdefault(group, []).append(span)
        kept: list[RequestRecord] = []
        late: list[LateSequence] = []
        for record in records:
            found = by_key.get((record.trace_id, record.span_id))
            if found is None or found not in late_groups:
                kept.append(record)
                continue
            group = found
            _, held, spans = stored[group]
            now = members[group]
            new = [span for span in now if span not in spans and span != held[2]]
            if not new:
                kept.append(record)  # the stored request itself again (a replay)
            elif len(new) == len(now):
                late.append(LateSequence(held, record, tuple(now)))
            else:
                own = {(record.trace_id, span): record for span in new}
                for request in requests:  # each new span's own record, the first of copies
                    key = (request.record.trace_id, request.record.span_id)
                    if own.get(key) is record:
                        own[key] = request.record
                merged = merge_sequences(list(own.values()))
                if merged is not None:
                    late.append(LateSequence(held, merged, tuple(new)))
        return kept, late

    def remember(self, records: Sequence[RequestRecord], requests: Sequence[Request]) -> None:
        """The requests just stored, by their group (the first stored of a group stays)."""
        by_key = self._groups(requests)
        if not by_key:
            return
        now = self._clock()
        stored = self._stored
        added: list[Remembered] = []
        written = {by_key.get((r.trace_id, r.span_id)) for r in records}
        spans: dict[tuple[str, str, str], list[str]] = {}
        for (_, span), group in by_key.items():
            if group in written and group not in stored:
                spans.setdefault(group, []).append(span)
        for record in records:
            found = by_key.get((record.trace_id, record.span_id))
            if found is not None and found not in stored:
                group = found
                request = (record.start, record.trace_id, record.span_id)
                stored[group] = (now, request, frozenset(spans[group]))
                added.append((group, now, request, tuple(spans[group])))
        dropped: list[tuple[str, str, str]] = []
        while len(stored) > self.capacity:
            dropped.append(stored.popitem(last=False)[0])
        self._last = ((), {})
        if self._store is not None and (added or dropped):
            self._store.save_groups(added, dropped, now - self.keep_s)

    def _expire(self) -> None:
        horizon = self._clock() - self.keep_s
        stored = self._stored
        while stored and next(iter(stored.values()))[0] < horizon:
            stored.popitem(last=False)


class _Trace:
    """One trace's request spans and pieces, by span id (the first of duplicates wins)."""

    __slots__ = ("_ways", "fragments", "nodes")

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bool, int]] = {}  # span id → (is a request, index)
        self.fragments: list[int] = []
        self._ways: dict[str, _Way] = {}

    def add_request(self, i: int, request: Request) -> None:
        self.nodes.setdefault(request.record.span_id, (True, i))

    def add_piece(self, j: int, piece: Piece) -> None:
        self.nodes.setdefault(piece.span_id, (False, j))
        if isinstance(piece, StageFragment) and piece.stage in STAGE_FIELDS:
            self.fragments.append(j)

    def decide(
        self,
        requests: Sequence[Request],
        pieces: Sequence[Piece],
        owned: dict[int, list[StageFragment]],
        out: Assembly,
    ) -> None:
        if not self.fragments:
            return
        gateways, ancestors = self._above(requests, pieces)
        for j in self.fragments:
            fragment = pieces[j]
            assert isinstance(fragment, StageFragment)
            verdict, owner = self._walk(fragment, requests, pieces)
            if verdict == _MERGED and fragment.stage == "gateway":
                # Inside the request, a span named after a gateway is the server's own time
                # (in its end-to-end time) and no gateway in front of it: settled, unused.
                out.merged.append(j)
                continue
            if verdict != _MERGED and fragment.span_id in gateways:
                verdict, owner = _MERGED, gateways[fragment.span_id]
            elif verdict != _MERGED and fragment.span_id in ancestors:
                verdict = Refusal.ANCESTOR
            if verdict == _MERGED and owner is not None:
                owned.setdefault(owner, []).append(fragment)
                out.merged.append(j)
            elif verdict == _ROOT:
                out.refused.setdefault(Refusal.NOT_DESCENDANT, []).append(j)
            elif isinstance(verdict, Refusal):
                out.refused.setdefault(verdict, []).append(j)

    def _walk(
        self, fragment: StageFragment, requests: Sequence[Request], pieces: Sequence[Piece]
    ) -> tuple[str, int | None]:
        """Up from ``fragment`` to the first request span, the root, or an unknown parent."""
        parent = fragment.parent_span_id
        if parent == fragment.span_id:
            return _ROOT, None
        end, owner, service = self._resolve(parent, pieces)
        if service is None or (service and service != fragment.service):
            return Refusal.OTHER_SERVICE, None  # the way up crosses into another service
        if end == _MERGED and owner is not None:
            if requests[owner].record.service != fragment.service:
                return Refusal.OTHER_SERVICE, None
            return _MERGED, owner
        return end, None

    def _resolve(self, span_id: str, pieces: Sequence[Piece]) -> _Way:
        """Where the way up from ``span_id`` (a piece, or not) ends: at a request span
        (``_MERGED``, its index), the root or a loop (``_ROOT``), or an unknown span
        (``_WAITING``); and the one service of the pieces on the way (``""``: none;
        ``None``: more than one). Memoised, so that a trace costs time linear in its size."""
        path: list[str] = []
        on_path: set[str] = set()
        current = span_id
        while True:
            if current in self._ways:
                way = self._ways[current]
                break
            node = self.nodes.get(current) if current else None
            if not current or current in on_path:
                way = _Way(_ROOT, None, "")
                break
            if node is None:
                way = _Way(_WAITING, None, "")
                break
            if node[0]:
                way = _Way(_MERGED, node[1], "")
                self._ways[current] = way
                break
            path.append(current)
            on_path.add(current)
            current = pieces[node[1]].parent_span_id
        for span in reversed(path):
            service = pieces[self.nodes[span][1]].service
            if way.service is None or (way.service and way.service != service):
                way = _Way(way.end, way.owner, None)
            else:
                way = _Way(way.end, way.owner, service)
            self._ways[span] = way
        return way

    def _above(
        self, requests: Sequence[Request], pieces: Sequence[Piece]
    ) -> tuple[dict[str, int], set[str]]:
        """The gateway span directly in front of each request (span id → request index), and
        every other piece above a request span. Each piece is visited once."""
        gateways: dict[str, int] = {}
        ancestors: set[str] = set()
        visited: set[str] = set()
        for is_request, i in list(self.nodes.values()):
            place = requests[i].place if is_request else None
            if place is None:
                continue
            parent, first = place.parent_span_id, True
            while parent and parent not in visited:
                node = self.nodes.get(parent)
                if node is None or node[0]:
                    break  # unknown, or another request: its own ancestors are its own
                visited.add(parent)
                piece = pieces[node[1]]
                if first and _is_gateway(piece):
                    gateways.setdefault(parent, i)
                else:
                    ancestors.add(parent)
                parent, first = piece.parent_span_id, False
        return gateways, ancestors


class _Way(NamedTuple):
    end: str
    owner: int | None
    service: str | None


def _is_gateway(piece: Piece) -> bool:
    return (
        isinstance(piece, StageFragment) and piece.stage == "gateway" and piece.kind == KIND_SERVER
    )


# --- merging a request's own fragments into its record ---------------------------------


def stage_seconds(
    fragments: Iterable[StageFragment], start_ns: int = 0, end_ns: int = 0
) -> dict[str, float]:
    """Each stage's time among ``fragments``, every instant counted once.

    Fragments with known times are intervals: an instant covered by several of them counts
    for the most recently started one (a nested span's time is its own, not its parent's;
    two spans of one stage running side by side count once), and only within the request's
    own span ``[start_ns, end_ns]`` when that is known (0: not known). Fragments without
    times (spooled by an older sidecar) add up. Gateway fragments are left out: a gateway
    encloses the request (see ``merge_stages``).
    """
    totals: dict[str, float] = {}
    timed: list[tuple[int, int, str]] = []
    for f in fragments:
        if f.stage == "gateway":
            continue
        if f.start_ns > 0 and f.end_ns >= f.start_ns:
            lo, hi = f.start_ns, f.end_ns
            if end_ns > start_ns > 0:
                lo, hi = max(lo, start_ns), min(hi, end_ns)
            if hi >= lo:  # within the request's span: the stage was seen, maybe for 0 s
                timed.append((lo, hi, f.stage))
                totals.setdefault(f.stage, 0.0)
        else:
            totals[f.stage] = totals.get(f.stage, 0.0) + f.seconds
    for stage, nanos in _self_times(timed).items():
        totals[stage] = totals.get(stage, 0.0) + nanos / 1e9
    return totals


def _self_times(intervals: list[tuple[int, int, str]]) -> dict[str, int]:
    """Nanoseconds per stage, each instant given to the latest-starting interval covering it
    (ties: the one that ends first). A sweep over the sorted boundaries: O(n log n)."""
    out: dict[str, int] = {}
    intervals = sorted(i for i in intervals if i[1] > i[0])
    bounds = sorted({t for lo, hi, _ in intervals for t in (lo, hi)})
    active: list[tuple[int, int, str]] = []  # (-start, end, stage): the latest start on top
    i = 0
    for a, b in itertools.pairwise(bounds):
        while i < len(intervals) and intervals[i][0] <= a:
            lo, hi, stage = intervals[i]
            heapq.heappush(active, (-lo, hi, stage))
            i += 1
        while active and active[0][1] <= a:
            heapq.heappop(active)
        if active:
            stage = active[0][2]
            out[stage] = out.get(stage, 0) + (b - a)
    return out


def merge_stages(
    record: RequestRecord,
    fragments: Iterable[StageFragment],
    start_ns: int = 0,
    end_ns: int = 0,
) -> RequestRecord:
    """Fill the stage timings the request span did not report from its own fragments.

    The caller has decided which fragments are the request's (``assemble``); only
    those of the record's trace are read. Each stage's time is ``stage_seconds`` of them
    within the request span ``[start_ns, end_ns]`` (when known); a value the request span
    itself reported always wins. A gateway fragment is the enclosing gateway span's
    duration; the gateway's share is that minus the request's end-to-end time.
    """
    mine = [f for f in fragments if f.trace_id == record.trace_id]
    totals = stage_seconds(mine, start_ns, end_ns)
    gateways = [f.seconds for f in mine if f.stage == "gateway"]
    if gateways and record.e2e_s is not None:
        # A gateway span encloses the whole request: its own share is what the engine's
        # end-to-end time does not account for.
        totals["gateway"] = max(0.0, min(gateways) - record.e2e_s)
    updates: dict[str, Any] = {
        STAGE_FIELDS[stage]: seconds
        for stage, seconds in totals.items()
        if getattr(record, STAGE_FIELDS[stage]) is None
    }
    if not updates:
        return record
    try:
        return dataclasses.replace(record, **updates)
    except InvalidRecord:
        return record
