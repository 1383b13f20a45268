"""How ``infersight serve`` runs the API under uvicorn: connection limits and a clean log.

``server_config`` applies the ``httpd`` limits (header deadline against slowloris, idle
keep-alive, a connection cap, a header size cap) and installs ``RedactSecrets`` on uvicorn's
access log: a token that a client put in a query string (``?token=…``, ``?api_key=…``) or
anywhere in a path is written as ``[redacted]``, so secrets never reach the log.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any, Final

import uvicorn

from infersight.api.settings import ApiSettings
from infersight.httpd import ConnectionLimits

#: Query parameters whose values are secrets whatever they hold.
SECRET_PARAMS: Final = re.compile(
    r"(?i)([?&;](?:[^=&;#]*(?:token|key|secret|password|passwd|auth|session|signature)"
    r"[^=&;#]*)=)([^&;#]*)"
)
REDACTED: Final = "[redacted]"


class RedactSecrets(logging.Filter):
    """Rewrites access-log records so that neither secret query values nor known tokens show."""

    def __init__(self, tokens: Iterable[str] = ()) -> None:
        super().__init__()
        self.tokens = sorted({t for t in tokens if t}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        text = SECRET_PARAMS.sub(lambda m: m.group(1) + REDACTED, text)
        for token in self.tokens:
            text = text.replace(token, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(self.redact(a) if isinstance(a, str) else a for a in record.args)
        elif record.args is None and isinstance(record.msg, str):
            record.msg = self.redact(record.msg)
        return True


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
