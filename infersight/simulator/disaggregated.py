"""Disaggregated prefill/decode serving: an llm-d-style routing proxy over two pools.

Each decode instance has a proxy in front of it (llm-d's routing sidecar) that receives its
share of the deployment's traffic. For each user request the proxy routes (``route_s``),
sends the prompt to a prefill instance (round robin over the prefill pool; one output
token), and when that answers, sends the request to its own decode instance. The decode
instance holds the request while its KV cache arrives (vLLM's ``deferred`` waiting reason:
the transfer, times the ``kv_transfer_slow`` fault of that instance, in its queue time), then
computes the last prompt token and decodes every output token. Each pool saturates on its
own: prefill instances compete for prefill compute, decode instances for batch slots.

What comes out per user request: the prefill instance's record as a part (``Role.PREFILL``,
its own ``llm_request`` span), and the user's request (``Completion.record``: what the user
felt from the proxy's arrival, with the P/D stages, as ``collector.assembly`` folds it) with
the proxy's legs and the decode instance's own record in ``Completion.pd``.

The proxy never sees a request before the prefill pool finished it, so the pools are
advanced in order: prefill to ``t``, then the prefill legs that ended before ``t`` are sent
on to the decode pool (in time order), then decode to ``t``.

**Resizing a pool** (the scaling backtest, ``simulator.autoscale_pd``): ``add`` puts a new
engine in a pool that takes work only from its ready time (the cold start); ``retire`` takes
one out of rotation — a cold-starting one is cancelled, a serving one gets no new prefill
legs or user requests and drains what it holds (it is advanced until it is empty, then
dropped). ``submit`` is the deployment's gateway: a user request goes to the next decode
proxy in rotation that takes work. A router that is never resized routes exactly as before.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from datetime import datetime, timedelta
from typing import Final

import numpy as np

from infersight.core.records import RequestRecord, Role
from infersight.core.samples import GpuSample, ServerSample
from infersight.simulator.engine import InstanceSim
from infersight.simulator.events import Batch, Completion, ProxyLegs
from infersight.simulator.faults import FaultSchedule
from infersight.simulator.request import IdSource
from infersight.simulator.scenario import Disaggregation
from infersight.simulator.workload import Arrival, ArrivalStream

#: One network hop between the proxy and an engine (each way).
NET_S: Final = 0.0005
#: The port the proxy's ``llm_d.pd_proxy.prefill_target`` names on a prefill instance.
PREFILL_PORT: Final = 8000
_PREFILL_SALT: Final = 0x2545F491
_DECODE_SALT: Final = 0x4F1BBCDC


@dataclasses.dataclass(slots=True)
class _InFlight:
    """One user request between the proxy's arrival and the decode instance's answer."""

    arrival: Arrival
    decode: int
    prefill: int
    request_span: str
    prefill_span: str
    decode_span: str
    prefill_end: float = 0.0


def _salted(span: str, salt: int) -> str:
    return f"{(int(span, 16) ^ salt) or 1:016x}"


def _seconds(at: datetime, epoch: datetime) -> float:
    return (at - epoch).total_seconds()


class PdRouter:
    """The proxies of one disaggregated deployment and its two pools, in virtual time."""

    def __init__(
        self,
        pd: Disaggregation,
        prefill: list[InstanceSim],
        decode: list[InstanceSim],
        arrivals: list[ArrivalStream],
        decode_faults: list[FaultSchedule],
        rng: np.random.Generator,
        epoch: datetime,
    ) -> None:
        self.pd = pd
        self.prefill = prefill
        self.decode = decode
        self._arrivals = arrivals
        self._decode_faults = decode_faults
        self._rng = rng
        self._epoch = epoch
        self._ids = IdSource(rng.bytes)
        self._next_prefill = 0
        self._flight: dict[str, _InFlight] = {}
        #: Prefill legs done, not yet sent on: (leg end, seq, trace id).
        self._done: list[tuple[float, int, str]] = []
        self._seq = 0
        self.failed_prefills = 0
        #: Resizing: when each engine (by name) takes work; retired ones (draining); gone ones
        #: (drained or cancelled: no longer advanced); the gateway's next decode proxy.
        self._ready_at: dict[str, float] = {}
        self._retired: set[str] = set()
        self._gone: set[str] = set()
        self._next_decode = 0

    @property
    def instances(self) -> list[InstanceSim]:
        return self.prefill + self.decode

    @property
    def preemptions_total(self) -> int:
        return sum(sim.preemptions_total for sim in self.instances)

    def advance_to(self, t: float) -> Batch:
        """Everything that happens before ``t``; returns what finished and was sampled."""
        merged = sorted(
            ((a, d) for d, stream in enumerate(self._arrivals) for a in stream.pop_until(t)),
            key=lambda pair: pair[0].t,
        )
        for a, d in merged:
            self._route(a, d)
        completions: list[Completion] = []
        servers: list[ServerSample] = []
        gpus: list[GpuSample] = []
        for sim in self.prefill:
            if sim.name in self._gone:
                continue
            sim.advance_to(t)
            part = sim.drain()
            completions.extend(self._prefill_done(c) for c in part.completions)
            servers.extend(part.server_samples)
            gpus.extend(part.gpu_samples)
        self._send_decodes(t)
        for sim in self.decode:
            if sim.name in self._gone:
                continue
            sim.advance_to(t)
            part = sim.drain()
            completions.extend(self._decode_done(c) for c in part.completions)
            servers.extend(part.server_samples)
            gpus.extend(part.gpu_samples)
        self._retire_drained()
        return Batch(tuple(completions), tuple(servers), tuple(gpus))

    # -- resizing -----------------------------------------------------------------------

    def pool(self, role: str) -> list[InstanceSim]:
        return self.prefill if role == "prefill" else self.decode

    def takes_work(self, sim: InstanceSim, t: float) -> bool:
        """Whether ``sim`` is in rotation at ``t``: ready (past its cold start), not retired."""
        return sim.name not in self._retired and self._ready_at.get(sim.name, -math.inf) <= t

    def members(self, role: str) -> list[InstanceSim]:
        """The pool's engines asked for (serving or cold-starting), not retired."""
        return [s for s in self.pool(role) if s.name not in self._retired]

    def draining(self, role: str) -> list[InstanceSim]:
        """The pool's retired engines still finishing what they hold."""
        return [s for s in self.pool(role) if s.name in self._retired - self._gone]

    def add(self, sim: InstanceSim, ready_at: float) -> None:
        """A new engine of ``sim.role``'s pool, taking work from ``ready_at`` on."""
        if sim.role not in ("prefill", "decode"):
            raise ValueError("a pool engine's role is prefill or decode")
        self._ready_at[sim.name] = ready_at
        self.pool(sim.role).append(sim)
        if sim.role == "decode":
            self._decode_faults.append(FaultSchedule(()))

    def retire(self, role: str, t: float) -> InstanceSim | None:
        """Take one engine of the pool out of rotation at ``t``: the newest cold-starting one
        (cancelled), else the serving one that became ready last (it drains)."""
        members = self.members(role)
        if not members:
            return None
        sim = max(members, key=lambda s: self._ready_at.get(s.name, -math.inf))
        self._retired.add(sim.name)
        if self._ready_at.get(sim.name, -math.inf) > t:
            self._gone.add(sim.name)  # never served: nothing to drain
        return sim

    def submit(self, a: Arrival) -> None:
        """A user request at the deployment's gateway: to the next decode proxy in rotation
        that takes work at ``a.t``."""
        self._route(a, self._pick(self.decode, a.t, "_next_decode"))

    def _pick(self, pool: list[InstanceSim], t: float, cursor: str) -> int:
        """Round robin over the engines that take work at ``t`` (all of them unless resized);
        with none ready, the first one not retired."""
        n = len(pool)
        for _ in range(n):
            i = int(getattr(self, cursor)) % n
            setattr(self, cursor, (i + 1) % n)
            if self.takes_work(pool[i], t):
                return i
        return next((i for i, s in enumerate(pool) if s.name not in self._retired), 0)

    def _retire_drained(self) -> None:
        """Retired engines with nothing left (and, decode, no request still on its way)."""
        for name in self._retired - self._gone:
            sim = next(s for s in self.instances if s.name == name)
            if sim.next_event() < math.inf:
                continue
            if sim.role == "decode":
                index = self.decode.index(sim)
                if any(f.decode == index for f in self._flight.values()):
                    continue
            self._gone.add(name)

    def _route(self, a: Arrival, decode: int) -> None:
        trace, span, _ = self._ids.next()
        prefill = self._pick(self.prefill, a.t, "_next_prefill")
        flight = _InFlight(
            a, decode, prefill, span, _salted(span, _PREFILL_SALT), _salted(span, _DECODE_SALT)
        )
        self._flight[trace] = flight
        leg = dataclasses.replace(
            a,
            t=a.t + self.pd.route_s + NET_S,
            output_tokens=1,
            max_tokens=1,
            trace_id=trace,
            parent_span_id=flight.prefill_span,
        )
        self.prefill[prefill].submit(leg, temperature=0.0, top_p=1.0)

    def _prefill_done(self, c: Completion) -> Completion:
        r = c.record
        flight = self._flight.get(r.trace_id)
        if flight is not None:
            if r.is_error:  # the proxy answers the user with the prefill's error
                self.failed_prefills += 1
                del self._flight[r.trace_id]
            else:
                end = _seconds(r.start, self._epoch) + (r.e2e_s or 0.0) + NET_S
                flight.prefill_end = end
                self._seq += 1
                heapq.heappush(self._done, (end, self._seq, r.trace_id))
        return dataclasses.replace(c, record=dataclasses.replace(r, role=Role.PREFILL))

    def _send_decodes(self, t: float) -> None:
        """Send on every prefill leg that ended before ``t`` (later ones may still be
        overtaken by legs another prefill instance ends before them)."""
        while self._done and self._done[0][0] < t:
            end, _, trace = heapq.heappop(self._done)
            flight = self._flight[trace]
            a = flight.arrival
            sim = self.decode[flight.decode]
            arrive = end + NET_S
            fx = self._decode_faults[flight.decode].effects(arrive)
            transfer = self.pd.transfer_s(a.input_tokens) * fx.kv_transfer_factor
            failed = bool(fx.kv_failure_share) and self._rng.random() < fx.kv_failure_share
            leg = dataclasses.replace(
                a, t=arrive, trace_id=trace, parent_span_id=flight.decode_span
            )
            sim.submit(leg, kv_transfer_s=transfer, kv_failed=failed)

    def _decode_done(self, c: Completion) -> Completion:
        engine = c.record
        flight = self._flight.pop(engine.trace_id)
        origin = self._epoch + timedelta(seconds=flight.arrival.t)
        prefill_from = self.pd.route_s
        prefill_to = flight.prefill_end - flight.arrival.t
        decode_from = prefill_to
        vllm_from = _seconds(engine.start, self._epoch) - flight.arrival.t
        vllm_to = vllm_from + (engine.e2e_s or 0.0)
        total = vllm_to + 2 * NET_S
        target = f"{self.prefill[flight.prefill].name}:{PREFILL_PORT}"
        legs = ProxyLegs(
            engine=engine,
            prefill_target=target,
            connector=self.pd.connector,
            route_s=prefill_from,
            prefill_leg_s=prefill_to - prefill_from,
            decode_from_s=decode_from,
            decode_leg_s=vllm_to + NET_S - decode_from,
            total_s=total,
            request_span=flight.request_span,
            prefill_span=flight.prefill_span,
            decode_span=flight.decode_span,
        )
        return dataclasses.replace(c, record=user_record(engine, origin, legs), pd=legs)


def user_record(engine: RequestRecord, origin: datetime, legs: ProxyLegs) -> RequestRecord:
    """What the user felt: from the proxy's arrival at ``origin`` to its answer's end; the
    first token is the decode instance's. Route, prefill leg and KV transfer (the gap after
    the prefill leg plus the decode instance's queue: it held the request for its KV cache)
    as stages; the decode instance's tokens, TPOT and decode time."""
    lead = (engine.start - origin).total_seconds()
    gap = lead - (legs.route_s + legs.prefill_leg_s)
    return dataclasses.replace(
        engine,
        start=origin,
        role=Role.DECODE,
        peer=legs.prefill_target,
        ttft_s=lead + engine.ttft_s if engine.ttft_s is not None else None,
        e2e_s=legs.total_s,
        queue_s=None,
        route_s=legs.route_s,
        prefill_s=legs.prefill_leg_s,
        kv_transfer_s=gap + (engine.queue_s or 0.0),
    )
