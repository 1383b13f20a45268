"""Bearer-token checks for the OTLP receivers, and the rule that a receiver listening beyond
loopback must have a token unless the operator explicitly opted out."""

from __future__ import annotations

import hmac
from typing import Final

from infersight.core.errors import ConfigurationError
from infersight.core.net import is_loopback

#: The shortest bearer token accepted, as for the API's tokens (``api.auth``).
MIN_TOKEN_CHARS: Final = 16


def check_bind(host: str, token: str | None, insecure_no_auth: bool) -> None:
    """Refuse to listen on a non-loopback address without a token (unless opted out), and
    any token shorter than ``MIN_TOKEN_CHARS``."""
    if token and len(token.strip()) < MIN_TOKEN_CHARS:
        raise ConfigurationError(
            f"the OTLP bearer token is shorter than {MIN_TOKEN_CHARS} characters"
        )
    if not token and not insecure_no_auth and not is_loopback(host):
        raise ConfigurationError(
            f"listening on {host} needs a bearer token (--token-file or INFERSIGHT_OTLP_TOKEN) "
            "or an explicit --insecure-no-auth"
        )


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` value carries the expected bearer token."""
    if not token:
        return True
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode(), token.encode())
