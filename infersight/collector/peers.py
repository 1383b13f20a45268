"""First contact with each peer, said once: the sidecar logs one INFO line the first time it
receives an OTLP export from a service (per transport and client address), the first time a
scrape succeeds (or, until then, why the first one failed), and the first time it ships to
the store, so that an operator connecting a server sees at once whether it works, and what
the spans were recognised as. The same lines are kept for ``/healthz`` (``peers``).

Memory is bounded: at most ``capacity`` peers are remembered; past that one line says so and
no further first contact is announced.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger("infersight.collector.peers")

#: Peers remembered (and announced) at most.
CAPACITY = 1024
#: Peers listed in ``/healthz`` at most (the first ones met).
HEALTH_LIMIT = 32
#: Longest a name from the wire (a service, an address) is shown.
_NAME_LEN = 100
#: How a record's engine is named to an operator.
ENGINE_NAMES: Mapping[str, str] = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "tgi": "TGI",
    "trtllm": "TensorRT-LLM",
    "generic": "generic GenAI",
}
TRANSPORTS: Mapping[str, str] = {"http": "HTTP", "grpc": "gRPC"}
UNRECOGNISED = (
    "no span was recognised as an LLM request: check the engine's tracing flags, see docs/connect/"
)


def shown(text: str) -> str:
    """A name received from a peer, safe to log: printable, bounded."""
    clean = "".join(c if c.isprintable() else "?" for c in text[:_NAME_LEN])
    return clean + ("…" if len(text) > _NAME_LEN else "")


def peer_host(peer: str) -> str:
    """The client address of a gRPC peer string (``ipv4:10.0.0.5:5432`` → ``10.0.0.5``,
    ``ipv6:[::1]:5432`` → ``::1``); the port is dropped (each connection has its own)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0] or rest
    if kind == "ipv6":
        host = rest.rpartition(":")[0] if rest.startswith("[") else rest
        return host.strip("[]")
    return peer if kind != "unix" else "local"


def export_line(transport: str, service: str, client: str, tally: Mapping[str, int]) -> str:
    """The first-contact line of an OTLP export from one service (``tally``: see
    ``ingest.Prepared.sources``)."""
    who = f"service {shown(service) or '(no service.name)'}"
    if client:
        who += f" ({shown(client)})"
    parts = [f"{tally.get('spans', 0)} spans"]
    engines = sorted(
        (key.removeprefix("record:"), n) for key, n in tally.items() if key.startswith("record:")
    )
    records = sum(n for _, n in engines)
    if records:
        names = ", ".join(ENGINE_NAMES.get(e, e) for e, _ in engines)
        parts.append(f"{records} llm_request records mapped as {names}")
    if tally.get("client"):
        parts.append(f"{tally['client']} client records")
    if tally.get("stage"):
        parts.append(f"{tally['stage']} stage spans")
    if tally.get("gateway"):
        parts.append(f"{tally['gateway']} gateway spans")
    if tally.get("attribution"):
        parts.append(f"{tally['attribution']} spans naming who their trace is for")
    if tally.get("rejected"):
        parts.append(f"{tally['rejected']} spans rejected as bad data")
    line = f"first OTLP export over {TRANSPORTS.get(transport, transport)} from {who}: "
    line += ", ".join(parts)
    understood = ("client", "stage", "gateway", "attribution")
    if not records and not any(tally.get(key) for key in understood):
        line += f"; {UNRECOGNISED}"
    return line


class FirstContacts:
    """Peers met so far, each announced once (a failing peer once more when it first works)."""

    def __init__(self, capacity: int = CAPACITY, clock: Callable[[], float] = time.time):
        self.capacity = capacity
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, ...], dict[str, Any]] = {}
        self._full = False

    def known(self, key: tuple[str, ...]) -> bool:
        """Whether ``key`` was announced as working (no line to build for it)."""
        entry = self._seen.get(key)
        return (entry is not None and entry["ok"]) or (entry is None and self._full)

    def announce(self, key: tuple[str, ...], kind: str, line: str, *, ok: bool = True) -> bool:
        """Log ``line`` if ``key`` is met for the first time (or first works, ``ok``);
        returns whether it was logged."""
        with self._lock:
            entry = self._seen.get(key)
            if entry is not None and (entry["ok"] or not ok):
                return False
            if entry is None and len(self._seen) >= self.capacity:
                if not self._full:
                    self._full = True
                    log.info("%d peers met: no further first contact is announced", self.capacity)
                return False
            at = datetime.fromtimestamp(self._clock(), UTC).isoformat(timespec="seconds")
            self._seen[key] = {"kind": kind, "ok": ok, "first_at": at, "said": line}
        log.log(logging.INFO if ok else logging.WARNING, "%s", line)
        return True

    def health(self) -> list[dict[str, Any]]:
        """The first ``HEALTH_LIMIT`` peers met, for ``/healthz``."""
        with self._lock:
            return [dict(e) for e in list(self._seen.values())[:HEALTH_LIMIT]]

    def __len__(self) -> int:
        return len(self._seen)
