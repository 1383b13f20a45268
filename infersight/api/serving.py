"""How ``infersight serve`` runs the API under uvicorn: connection limits and a clean log.

``server_config`` applies the ``httpd`` limits (header deadline against slowloris, idle
keep-alive, a connection cap, a header size cap) and installs ``RedactSecrets`` on uvicorn's
access log: a token that a client put in a query string (``?token=…``, ``?api_key=…``),
anywhere in a path, or URL-encoded inside another parameter (``?next=/x%3Ftoken%3D…``) is
written as ``[redacted]`` (``httpd.redact``), so secrets never reach the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import uvicorn

from infersight.api.settings import ApiSettings
from infersight.httpd import ConnectionLimits
from infersight.httpd.redact import REDACTED, RedactSecrets

__all__ = ["REDACTED", "RedactSecrets", "limits_of", "server_config"]


def limits_of(settings: ApiSettings) -> ConnectionLimits:
    return ConnectionLimits(
        header_timeout_s=settings.header_timeout_s,
        keep_alive_s=settings.keep_alive_s,
        max_connections=settings.max_connections,
    )


def server_config(
    app: Any, host: str, port: int, settings: ApiSettings, tokens: Iterable[str] = ()
) -> uvicorn.Config:
    """The uvicorn configuration of the API; logging is configured by this call."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="info",
        proxy_headers=False,
        **limits_of(settings).uvicorn_options(),
    )
    # uvicorn.Config configures logging when it is built, so the filter is added after.
    access = logging.getLogger("uvicorn.access")
    for old in [f for f in access.filters if isinstance(f, RedactSecrets)]:
        access.removeFilter(old)
    access.addFilter(RedactSecrets(tokens))
    return config
