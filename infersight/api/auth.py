"""Bearer-token authentication with two scopes: ``read`` (queries) and ``admin`` (changes).

Tokens come from ``INFERSIGHT_API_TOKENS`` (``read:TOKEN,admin:TOKEN``) and/or a secrets file
(one ``SCOPE TOKEN`` per line). With no tokens the API is open, which is allowed on a loopback
address and elsewhere only with ``--insecure-no-auth`` (``check_exposure`` decides at start).
Routes check the bearer header with ``api.deps.requires``.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from infersight.core.errors import ConfigurationError
from infersight.core.net import is_loopback

log = logging.getLogger(__name__)


class Scope(StrEnum):
    READ = "read"
    ADMIN = "admin"


#: What each scope grants: admin implies read.
GRANTS: dict[Scope, frozenset[Scope]] = {
    Scope.READ: frozenset({Scope.READ}),
    Scope.ADMIN: frozenset({Scope.READ, Scope.ADMIN}),
}


@dataclass(frozen=True, slots=True)
class Tokens:
    """Known tokens and their scopes; empty means authentication is off."""

    scopes: Mapping[str, Scope] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.scopes)

    def scope_of(self, token: str) -> Scope | None:
        found = None
        for known, scope in self.scopes.items():
            # Compare against every token so the time taken does not reveal which one matched.
            if hmac.compare_digest(known.encode(), token.encode()):
                found = scope
        return found


def _pair(scope: str, token: str, where: str) -> tuple[str, Scope]:
    try:
        parsed = Scope(scope.strip())
    except ValueError:
        raise ConfigurationError(
            f"unknown token scope {scope.strip()!r} in {where}",
            details={"allowed": ["read", "admin"]},
        ) from None
    if len(token.strip()) < 16:
        raise ConfigurationError(f"an API token in {where} is shorter than 16 characters")
    return token.strip(), parsed


def parse_tokens(env_value: str, file_path: str = "") -> Tokens:
    """Tokens from the environment's ``SCOPE:TOKEN`` list and the optional secrets file."""
    scopes: dict[str, Scope] = {}
    for item in filter(None, (p.strip() for p in env_value.split(","))):
        scope, sep, token = item.partition(":")
        if not sep:
            raise ConfigurationError("INFERSIGHT_API_TOKENS entries are SCOPE:TOKEN")
        key, value = _pair(scope, token, "INFERSIGHT_API_TOKENS")
        scopes[key] = value
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
            key, value = _pair(parts[0], parts[1], f"token file line {number}")
            scopes[key] = value
    return Tokens(scopes)


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
