"""How a browser authenticates to the dashboard: a token typed once, then a session cookie.

The login form takes an API token (the same ``read`` / ``admin`` tokens as the JSON API). On
success the server sets ``infersight_session``: ``EXPIRY.NONCE.MAC`` where MAC is
HMAC-SHA256 over ``EXPIRY.NONCE`` keyed by a PBKDF2 stretch of the token (so a leaked cookie
is a slow, not a cheap, oracle for guessing the token). The cookie never carries the
token; it is checked by recomputing the MAC with every known token (constant-time compare),
which also says which token, and so which scope, it belongs to. This needs no server-side
session store (API replicas that share tokens share sessions), removing or rotating a token
ends its sessions, and a session lasts ``SESSION_LIFETIME`` at most. The cookie is
``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no cross-site request carries it,
which is the CSRF defence of the login and logout forms) and ``Secure`` on HTTPS.

The dashboard only reads, so a ``read`` token is its viewer role; an ``admin`` token sees the
same pages. A ``Authorization: Bearer`` header is accepted as well (scripts, curl).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from datetime import datetime, timedelta
from typing import Final

from fastapi import Request, Response

from api.auth import GRANTS, Scope, Tokens

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


def viewer_scope(request: Request, now: datetime) -> Scope | None:
    """Who is looking: ``ADMIN`` when auth is off, else the cookie's or bearer's scope."""
    tokens: Tokens = request.app.state.tokens
    if not tokens.enabled:
        return Scope.ADMIN
    header = request.headers.get("authorization", "")
    kind, _, token = header.partition(" ")
    if kind.lower() == "bearer" and token.strip():
        return tokens.scope_of(token.strip())
    cookie = request.cookies.get(COOKIE)
    return verify(tokens, cookie, now) if cookie else None


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


def same_origin(request: Request) -> bool:
    """A form post from this site: browsers send ``Origin`` on POST; absent (old clients,
    scripts) is allowed, a foreign one is not (a login CSRF would sign a victim in as the
    attacker)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin.partition("://")[2] == host


def safe_next(target: str | None) -> str:
    """Where to go after logging in: a dashboard path only (no open redirect)."""
    if target and target.startswith("/ui/") and "//" not in target and "\\" not in target:
        return target
    return "/ui/overview"
