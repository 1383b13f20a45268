"""How a browser authenticates to the dashboard: a token typed once, then a session cookie.

The login form takes an API token (the same ``read`` / ``admin`` tokens as the JSON API). On
success the server sets ``infersight_session``: ``EXPIRY.NONCE.MAC`` where MAC is
HMAC-SHA256 over ``EXPIRY.NONCE`` keyed by a PBKDF2 stretch of the token (so a leaked cookie
is a slow, not a cheap, oracle for guessing the token). The cookie never carries the
token; it is checked by recomputing the MAC with every known token (constant-time compare),
which also says which token, and so which scope, it belongs to. No session store is needed
to sign in (API replicas that share tokens share sessions), removing or rotating a token
ends its sessions, and a session lasts ``SESSION_LIFETIME`` at most. Signing out revokes the
session on the server: its digest goes to ``service.sessions`` until it would have expired,
so a copy of the cookie replayed later is refused by every replica. The cookie is
``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no cross-site request carries it)
and ``Secure`` on HTTPS; forms posted from another origin are refused by ``api.origin``.

The dashboard only reads, so a ``read`` token is its viewer role; an ``admin`` token sees the
same pages. A ``Authorization: Bearer`` header is accepted as well (scripts, curl).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from datetime import UTC, datetime, timedelta
from typing import Final

from fastapi import Request, Response

from infersight.api.auth import GRANTS, Scope, Tokens
from infersight.api.context import AppContext
from infersight.api.deps import client_of
from infersight.service import sessions

COOKIE: Final = "infersight_session"
SESSION_LIFETIME: Final = timedelta(hours=12)
_CONTEXT: Final = b"infersight-dashboard-session/v1|"


#: PBKDF2 rounds that turn a token into its session key: a leaked cookie then costs an
#: attacker a full key derivation per guessed token, not one HMAC.
_KDF_ROUNDS: Final = 300_000


@functools.lru_cache(maxsize=256)
def _key(token: str) -> bytes:
    """``token``'s session key, derived once per token and process."""
    return hashlib.pbkdf2_hmac("sha256", token.encode(), _CONTEXT, _KDF_ROUNDS)


def _mac(token: str, payload: str) -> str:
    return hmac.new(_key(token), _CONTEXT + payload.encode(), hashlib.sha256).hexdigest()


def issue(token: str, now: datetime) -> str:
    """A session cookie value for ``token`` (already checked) that expires after the lifetime."""
    payload = f"{int((now + SESSION_LIFETIME).timestamp())}.{secrets.token_urlsafe(12)}"
    return f"{payload}.{_mac(token, payload)}"


def verify(tokens: Tokens, value: str, now: datetime) -> Scope | None:
    """The scope of a valid, unexpired session cookie; ``None`` otherwise."""
    expiry, _, rest = value.partition(".")
    nonce, _, mac = rest.partition(".")
    if not expiry.isdigit() or not nonce or len(mac) != 64 or len(value) > 200:
        return None
    if int(expiry) <= now.timestamp():
        return None
    payload = f"{expiry}.{nonce}"
    found = None
    for token, scope in tokens.scopes.items():
        # Every token is tried so the time taken does not say which one matched.
        if hmac.compare_digest(_mac(token, payload), mac):
            found = scope
    return found


def session_scope(app: AppContext, request: Request, now: datetime) -> Scope | None:
    """The scope of the request's session cookie: signed, unexpired and not signed out."""
    cookie = request.cookies.get(COOKIE)
    if not cookie:
        return None
    scope = verify(app.tokens, cookie, now)
    if scope is None or sessions.is_revoked(app.store, cookie):
        return None
    return scope


def revoke(app: AppContext, request: Request, now: datetime) -> None:
    """Sign the request's session out on the server (a valid cookie only: nothing to store
    for a forged one)."""
    cookie = request.cookies.get(COOKIE)
    if cookie and verify(app.tokens, cookie, now) is not None:
        expires = datetime.fromtimestamp(int(cookie.partition(".")[0]), UTC)
        sessions.revoke(app.store, cookie, expires, now)


def viewer_scope(app: AppContext, request: Request, now: datetime) -> Scope | None:
    """Who is looking: ``ADMIN`` when auth is off, else the cookie's or bearer's scope (a
    bearer token is checked under ``api.auth.FailureLimiter``: 429 past its limit)."""
    tokens = app.tokens
    if not tokens.enabled:
        return Scope.ADMIN
    header = request.headers.get("authorization", "")
    kind, _, token = header.partition(" ")
    if kind.lower() == "bearer" and token.strip():
        return tokens.check(token.strip(), client_of(request))
    return session_scope(app, request, now)


def viewer_tenants(app: AppContext, request: Request) -> frozenset[str] | None:
    """The tenants the viewer's token (bearer, else the session's) is limited to (``None``:
    every tenant); call it once ``viewer_scope`` has admitted the viewer."""
    tokens = app.tokens
    if not tokens.tenants:
        return None
    header = request.headers.get("authorization", "")
    kind, _, token = header.partition(" ")
    if kind.lower() == "bearer" and token.strip():
        return tokens.tenants_of(token.strip())
    value = request.cookies.get(COOKIE, "")
    payload, _, mac = value.rpartition(".")
    found = None
    for known, tenants in tokens.tenants.items():
        if hmac.compare_digest(_mac(known, payload), mac):
            found = tenants
    return found


def can_read(scope: Scope | None) -> bool:
    return scope is not None and Scope.READ in GRANTS[scope]


def set_session(response: Response, request: Request, value: str) -> None:
    response.set_cookie(
        COOKIE,
        value,
        max_age=int(SESSION_LIFETIME.total_seconds()),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_session(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")


def safe_next(target: str | None) -> str:
    """Where to go after logging in: a dashboard path only (no open redirect)."""
    if target and target.startswith("/ui/") and "//" not in target and "\\" not in target:
        return target
    return "/ui/overview"
