"""Web hygiene at the door: only known ``Host`` names, and same-origin proof for changes.

**Hosts.** A page on ``attacker.example`` whose name is re-pointed at 127.0.0.1 (DNS
rebinding) reaches a loopback API with ``Host: attacker.example``; refusing hosts other than
the listen address, ``localhost``, the loopback addresses and the ``allowed_hosts`` setting
closes that door. ``/healthz`` is exempt so that probes addressing the pod by IP keep working
(it tells nothing and changes nothing).

**Origins.** A browser lets any site submit a form (or a ``no-cors`` fetch) to any address,
with the user's cookies when it is same-site and with none needed when the API runs without
tokens (the loopback default). A request that changes something (any method but GET, HEAD and
OPTIONS) is therefore refused unless it proves it comes from this origin, by the headers
browsers set and pages cannot forge: ``Sec-Fetch-Site`` must be ``same-origin`` (or ``none``,
a user's own action) and ``Origin``, when present, must name the host the request was sent
to. A request with neither header is not from a browser (curl, scripts, the CLI: browsers
send ``Origin`` with every cross-origin POST, PUT and DELETE) and is let through to the usual
token check. This needs no CSRF token in the dashboard's forms, so they keep working as
plain HTML forms on any number of replicas.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from infersight.api.errors import send_error
from infersight.core.errors import Forbidden, InvalidInput

SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})
#: ``Sec-Fetch-Site`` values of a request this origin (or the user, typing) started.
SAME_SITE_FETCH: Final = frozenset({"same-origin", "none"})
#: Paths any host may ask for: liveness probes address a pod by IP.
HOST_EXEMPT: Final = frozenset({"/healthz", "/livez"})
_WILDCARD_LISTEN: Final = frozenset({"", "0.0.0.0", "::", "*"})  # noqa: S104 (names, not binds)


def hostname(host_header: str) -> str:
    """``Host`` value → its lower-case name without port or IPv6 brackets."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    if value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


class AllowedHosts:
    """The host names the API answers to: exact names, ``.example.com`` for a domain and its
    subdomains, or ``*`` for any (behind a proxy that checks the name itself)."""

    def __init__(self, listen_host: str, extra: Iterable[str] = ()) -> None:
        names = set(LOOPBACK_NAMES)
        listen = hostname(listen_host)
        if listen not in _WILDCARD_LISTEN:
            names.add(listen)
        self.any = False
        self.suffixes: list[str] = []
        for item in (e.strip().lower().rstrip(".") for e in extra):
            if item == "*":
                self.any = True
            elif item.startswith("."):
                self.suffixes.append(item)
            elif item:
                names.add(hostname(item))
        self.names = frozenset(names)

    def allows(self, host_header: str) -> bool:
        if self.any:
            return True
        name = hostname(host_header)
        if not name:
            return False
        return name in self.names or any(name.endswith(s) or name == s[1:] for s in self.suffixes)


def same_origin(headers: Headers) -> bool:
    """Whether a state-changing request proves it comes from this origin (module docstring)."""
    site = headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() not in SAME_SITE_FETCH:
        return False
    origin = headers.get("origin")
    if origin is None:
        return True
    scheme, sep, netloc = origin.strip().partition("://")
    host = headers.get("host", "")
    return bool(sep) and scheme in ("http", "https") and netloc.lower() == host.strip().lower()


class OriginGuard:
    """Pure ASGI middleware: refuses unknown hosts (400) and cross-origin changes (403)."""

    def __init__(self, app: ASGIApp, allowed: AllowedHosts) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if scope["path"] not in HOST_EXEMPT and not self.allowed.allows(headers.get("host", "")):
            await send_error(
                send,
                InvalidInput(
                    "unknown Host: this API answers to its listen address, localhost and "
                    "INFERSIGHT_ALLOWED_HOSTS",
                    details={"host": headers.get("host", "")[:128]},
                ),
            )
            return
        if scope["method"] not in SAFE_METHODS and not same_origin(headers):
            await send_error(
                send,
                Forbidden(
                    "a change sent from another site is refused (Origin / Sec-Fetch-Site)",
                    details={"origin": headers.get("origin", "")[:128]},
                ),
            )
            return
        await self.app(scope, receive, send)
