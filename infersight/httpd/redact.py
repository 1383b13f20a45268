"""Secrets kept out of access logs: the request targets both HTTP servers may log.

A target (``/path?a=1&b=2``) is cleaned part by part — the path, then each query parameter's
name and value:

* a parameter whose name, or any URL-decoding of its name, looks like a secret (``token``,
  ``api_key``, ``password``, …) has its value written as ``[redacted]``;
* a known token (the server's own) is replaced wherever it shows;
* a part whose URL-decodings still hold a secret after that — a token or a secret parameter
  encoded inside another value, as in ``next=/x%3Ftoken%3DSECRET``, or encoded twice — is
  written as ``[redacted]`` whole.

Decoding stops when it changes nothing more, or after ``MAX_DECODINGS`` rounds: the work is
bounded by the target's length (itself bounded by the header cap) times that number. A part
encoded more deeply than that (no client has a reason to) is written as ``[redacted]`` whole:
its encoded separators could hide a secret's name while leaving its value in clear.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import unquote_plus

REDACTED: Final = "[redacted]"
#: Names of parameters whose values are secrets whatever they hold.
SECRET_NAME: Final = re.compile(r"(?i)token|key|secret|password|passwd|auth|session|signature")
#: ``name=value`` with a secret name, anywhere in a text (a decoded value holding a query).
SECRET_ASSIGNMENT: Final = re.compile(
    r"(?i)((?:^|[?&;/#\s])(?:[^=&;#?/\s]*(?:token|key|secret|password|passwd|auth|session"
    r"|signature)[^=&;#?/\s]*)=)([^&;#\s]*)"
)
#: URL-decodings looked through, beyond the text as written (``%253D`` is two).
MAX_DECODINGS: Final = 4
_SEPARATORS: Final = re.compile(r"([&;])")
_SPACES: Final = re.compile(r"(\s+)")


def _decoded(text: str) -> str:
    return unquote_plus(text) if "%" in text or "+" in text else text


def decodings(text: str) -> tuple[list[str], bool]:
    """``text`` and its successive URL-decodings, each different from the one before, and
    whether decoding would go on beyond ``MAX_DECODINGS``."""
    levels = [text]
    for _ in range(MAX_DECODINGS):
        decoded = _decoded(levels[-1])
        if decoded == levels[-1]:
            return levels, False
        levels.append(decoded)
    return levels, _decoded(levels[-1]) != levels[-1]


class Redactor:
    """Cleans request targets (and texts holding them) of secrets; ``tokens`` are known
    secrets replaced wherever they show."""

    def __init__(self, tokens: Iterable[str] = ()) -> None:
        self.tokens = sorted({t for t in tokens if t}, key=len, reverse=True)

    def _substitute(self, text: str) -> str:
        if "=" in text:
            text = SECRET_ASSIGNMENT.sub(
                lambda m: m.group(1) + (REDACTED if m.group(2) else ""), text
            )
        for token in self.tokens:
            text = text.replace(token, REDACTED)
        return text

    def _holds_secret(self, text: str) -> bool:
        return self._substitute(text) != text

    def part(self, text: str) -> str:
        """One part of a target: its secrets replaced, or ``[redacted]`` whole when only a
        decoding of it shows them."""
        cleaned = self._substitute(text)
        levels, deeper = decodings(cleaned)
        if deeper or any(self._holds_secret(level) for level in levels[1:]):
            return REDACTED
        return cleaned

    def parameter(self, text: str) -> str:
        name, sep, value = text.partition("=")
        if not sep:
            return self.part(text)
        names, deeper = decodings(name)
        if deeper or any(SECRET_NAME.search(level) for level in names):
            return f"{self.part(name)}={REDACTED}"
        return f"{self.part(name)}={self.part(value)}"

    def target(self, text: str) -> str:
        """A request target (path and query string) without its secrets."""
        path, sep, query = text.partition("?")
        cleaned = self.part(path)
        if not sep:
            return cleaned
        pieces = _SEPARATORS.split(query)  # parameters at even places, separators between
        params = [p if i % 2 else self.parameter(p) for i, p in enumerate(pieces)]
        return f"{cleaned}?{''.join(params)}"

    def text(self, text: str) -> str:
        """A free text (a log message): each word cleaned as a target."""
        return "".join(w if not w or w.isspace() else self.target(w) for w in _SPACES.split(text))


class RedactSecrets(logging.Filter):
    """Rewrites log records (uvicorn's access log) so that no secret of a request's target
    shows: string arguments are cleaned as targets, a message without arguments as text."""

    def __init__(self, tokens: Iterable[str] = ()) -> None:
        super().__init__()
        self.redactor = Redactor(tokens)

    @property
    def tokens(self) -> list[str]:
        return self.redactor.tokens

    def redact(self, text: str) -> str:
        return self.redactor.text(text)

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(self.redact(a) if isinstance(a, str) else a for a in record.args)
        elif record.args is None and isinstance(record.msg, str):
            record.msg = self.redact(record.msg)
        return True
