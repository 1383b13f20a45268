"""Bearer-token authentication with three scopes: ``read`` (queries), ``admin`` (changes) and
``ingest`` (a sidecar's token for ``POST /api/v1/ingest``: it may only ship, nothing else, and
no other scope may ship).

Tokens come from ``INFERSIGHT_API_TOKENS`` (``read:TOKEN,admin:TOKEN``) and/or a secrets file
(one ``SCOPE TOKEN`` per line). With no tokens the API is open, which is allowed on a loopback
address and elsewhere only with ``--insecure-no-auth`` (``check_exposure`` decides at start).
Routes check the bearer header with ``api.deps.requires``.

**Tenant scopes.** A read token may be limited to tenants: ``read@acme|globex:TOKEN`` (in the
file ``read@acme|globex TOKEN``). Such a token reads only answers that can be limited to a
tenant (``tenant_filter``): a tenant outside its set is 403, no tenant given means its
tenants (one, or the union of several: ``core.query.Selector.tenants``, ``tenant IN (…)`` in
every store reader); every other answer (fleet-wide GPU, capacity, …) is 403 for it, with a
message that says why. Admin tokens see every tenant.

**Failed attempts are limited** (``FailureLimiter``): after ``per_client`` unknown tokens from
one client address within ``window_s``, or ``overall`` from all clients, every further check
(of any token) from that address, or from anyone, is answered 429 with ``Retry-After`` until
the window ends. The addresses are kept in a fixed-size LRU table, so memory stays bounded
whatever the number of clients. A dashboard session cookie is not a token check (it is signed
with a slow key derivation) and is never limited.
"""

from __future__ import annotations

import hmac
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Final

from fastapi import HTTPException

from infersight.core.errors import ConfigurationError, Forbidden
from infersight.core.net import is_loopback
from infersight.core.query import within_tenants

log = logging.getLogger(__name__)


class Scope(StrEnum):
    READ = "read"
    ADMIN = "admin"
    INGEST = "ingest"


#: What each scope grants: admin implies read; ingest grants only itself.
GRANTS: dict[Scope, frozenset[Scope]] = {
    Scope.READ: frozenset({Scope.READ}),
    Scope.ADMIN: frozenset({Scope.READ, Scope.ADMIN}),
    Scope.INGEST: frozenset({Scope.INGEST}),
}


#: Client addresses the failure limiter remembers at most (the least recent are forgotten).
LIMITER_CAPACITY: Final = 4096


class FailureLimiter:
    """Failed token checks per client address and in all, in fixed windows (module doc);
    thread-safe, bounded memory."""

    def __init__(
        self,
        per_client: int = 10,
        overall: int = 1000,
        window_s: float = 60.0,
        capacity: int = LIMITER_CAPACITY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_client = per_client
        self.overall = overall
        self.window_s = window_s
        self.capacity = capacity
        self.clock = clock
        self._clients: OrderedDict[str, list[float]] = OrderedDict()  # [window start, count]
        self._all = [0.0, 0.0]
        self._mutex = threading.Lock()

    def _current(self, entry: list[float], now: float) -> list[float]:
        if now - entry[0] >= self.window_s:
            entry[0], entry[1] = now, 0
        return entry

    def wait_s(self, client: str) -> float:
        """Seconds ``client`` must wait before its next token check (0: none)."""
        with self._mutex:
            now = self.clock()
            waits = []
            overall = self._current(self._all, now)
            if overall[1] >= self.overall:
                waits.append(overall[0] + self.window_s - now)
            entry = self._clients.get(client)
            if entry is not None and self._current(entry, now)[1] >= self.per_client:
                waits.append(entry[0] + self.window_s - now)
            return max(waits, default=0.0)

    def failed(self, client: str) -> None:
        """Count one unknown token from ``client``."""
        with self._mutex:
            now = self.clock()
            self._current(self._all, now)[1] += 1
            entry = self._clients.pop(client, None) or [now, 0.0]
            self._current(entry, now)[1] += 1
            self._clients[client] = entry  # the most recent last
            while len(self._clients) > self.capacity:
                self._clients.popitem(last=False)

    def check(self, client: str) -> None:
        """Raise the 429 (with ``Retry-After``) while ``client`` must wait."""
        wait = self.wait_s(client)
        if wait > 0:
            raise HTTPException(
                429,
                "too many failed sign-in attempts; retry later",
                headers={"Retry-After": str(max(1, math.ceil(wait)))},
            )


@dataclass(frozen=True, slots=True)
class Tokens:
    """Known tokens and their scopes; empty means authentication is off. ``tenants``: the
    tenants of the tokens limited to some (module doc); a token not in it sees them all."""

    scopes: Mapping[str, Scope] = field(default_factory=dict)
    tenants: Mapping[str, frozenset[str]] = field(default_factory=dict)
    limiter: FailureLimiter = field(default_factory=FailureLimiter, compare=False)

    @property
    def enabled(self) -> bool:
        return bool(self.scopes)

    def check(self, token: str, client: str) -> Scope | None:
        """``token``'s scope (``None``: unknown, and counted against ``client``); a 429 while
        ``client`` has failed too often (``FailureLimiter``)."""
        self.limiter.check(client)
        scope = self.scope_of(token)
        if scope is None:
            self.limiter.failed(client)
        return scope

    def tenants_of(self, token: str) -> frozenset[str] | None:
        """The tenants a known ``token`` is limited to (``None``: every tenant)."""
        found = None
        for known, tenants in self.tenants.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = tenants
        return found

    def scope_of(self, token: str) -> Scope | None:
        found = None
        for known, scope in self.scopes.items():
            # Compare against every token so the time taken does not reveal which one matched.
            if hmac.compare_digest(known.encode(), token.encode()):
                found = scope
        return found


def _pair(scope: str, token: str, where: str) -> tuple[str, Scope, frozenset[str] | None]:
    name, at, listed = scope.strip().partition("@")
    try:
        parsed = Scope(name)
    except ValueError:
        raise ConfigurationError(
            f"unknown token scope {name!r} in {where}",
            details={"allowed": ["read", "read@TENANT|TENANT", "admin", "ingest"]},
        ) from None
    if len(token.strip()) < 16:
        raise ConfigurationError(f"an API token in {where} is shorter than 16 characters")
    tenants = None
    if at:
        tenants = frozenset(t.strip() for t in listed.split("|") if t.strip())
        if parsed is not Scope.READ or not tenants:
            raise ConfigurationError(
                f"a tenant scope in {where} is read@TENANT|TENANT… (admin tokens see every tenant)"
            )
    return token.strip(), parsed, tenants


def parse_tokens(
    env_value: str, file_path: str = "", limiter: FailureLimiter | None = None
) -> Tokens:
    """Tokens from the environment's ``SCOPE:TOKEN`` list and the optional secrets file."""
    scopes: dict[str, Scope] = {}
    limited: dict[str, frozenset[str] | None] = {}
    for item in filter(None, (p.strip() for p in env_value.split(","))):
        scope, sep, token = item.partition(":")
        if not sep:
            raise ConfigurationError("INFERSIGHT_API_TOKENS entries are SCOPE:TOKEN")
        key, value, tenants = _pair(scope, token, "INFERSIGHT_API_TOKENS")
        scopes[key], limited[key] = value, tenants
    if file_path:
        try:
            lines = Path(file_path).read_text().splitlines()
        except OSError as exc:
            raise ConfigurationError(f"cannot read the API token file: {exc.strerror}") from None
        for number, line in enumerate(lines, 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            parts = text.split()
            if len(parts) != 2:
                raise ConfigurationError(f"token file line {number}: expected 'SCOPE TOKEN'")
            key, value, tenants = _pair(parts[0], parts[1], f"token file line {number}")
            scopes[key], limited[key] = value, tenants
    tenants_of = {key: tenants for key, tenants in limited.items() if tenants is not None}
    return Tokens(scopes, tenants_of, limiter or FailureLimiter())


def tenant_filter(
    tenants: frozenset[str] | None, asked: str | None
) -> tuple[str | None, frozenset[str] | None]:
    """``(tenant, tenant set)`` of a ``core.query.Selector`` for a caller limited to
    ``tenants`` (``None``: not limited) who asked for ``asked``: ``asked`` within the scope
    (``Forbidden`` outside it), the scope's one tenant when none was asked, and the whole set
    (their union, ``tenant IN (…)``) for a token of several tenants that named none."""
    if tenants is None or asked is not None or len(tenants) == 1:
        return scoped_tenant(tenants, asked), None
    return None, tenants


def scoped_tenant(tenants: frozenset[str] | None, asked: str | None) -> str | None:
    """The tenant an answer is limited to for a caller limited to ``tenants`` (``None``: not
    limited) who asked for ``asked``: ``asked`` within the scope, the scope's one tenant when
    none was asked; otherwise ``Forbidden``."""
    if tenants is None:
        return asked
    if asked is not None:
        if asked not in tenants:
            raise Forbidden(
                f"this token may not read tenant {asked!r}", details={"tenants": sorted(tenants)}
            )
        return asked
    if len(tenants) == 1:
        return next(iter(tenants))
    raise Forbidden(
        "this token is limited to several tenants: name one with tenant=",
        details={"tenants": sorted(tenants)},
    )


#: Whether something pinned by labels lies within a caller's tenants (``core.query``: the use
#: cases filter by the same rule).
within_scope: Final = within_tenants


def check_within_scope(
    tenants: frozenset[str] | None, labels: Mapping[str, str], what: str
) -> None:
    """``Forbidden`` unless ``within_scope``; ``what`` names the thing in the message."""
    if not within_scope(tenants, labels):
        assert tenants is not None
        raise Forbidden(
            f"this token is limited to tenants, and {what} covers other tenants (or every one)",
            details={"tenants": sorted(tenants)},
        )


def refuse_scoped(tenants: frozenset[str] | None) -> None:
    """``Forbidden`` for a caller limited to tenants: an answer that cannot be limited to them."""
    if tenants is not None:
        raise Forbidden(
            "this token is limited to tenants, and this answer cannot be limited to a tenant",
            details={"tenants": sorted(tenants)},
        )


def check_exposure(host: str, tokens: Tokens, insecure_no_auth: bool) -> None:
    """Refuse to serve an open API beyond loopback unless the operator insisted."""
    if tokens.enabled or is_loopback(host):
        return
    if not insecure_no_auth:
        raise ConfigurationError(
            f"refusing to serve without API tokens on {host}: set INFERSIGHT_API_TOKENS or "
            "INFERSIGHT_API_TOKENS_FILE, or pass --insecure-no-auth",
            details={"host": host},
        )
    log.warning("serving the API WITHOUT authentication on %s (--insecure-no-auth)", host)
