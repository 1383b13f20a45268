"""Request limits: a cap on body size, checked on the declared length and while reading
(``BodyLimit``); and text without control characters in every parameter (``TextGuard``).

Pure ASGI middleware, so that an oversized upload is refused before a route parses it, and a
NUL never reaches a route, a query or the store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Final
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from infersight.api.errors import HtmlErrors, send_error
from infersight.core.errors import InvalidInput, TooLarge


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _Oversized
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _Oversized:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        error = TooLarge(
            f"request body larger than {self.max_bytes} bytes",
            details={"max_bytes": self.max_bytes},
        )
        await send_error(send, error)


class _Oversized(Exception):
    pass


# -- text without control characters ---------------------------------------------------------

#: The control characters no parameter (path, query, form field) can hold: C0 and DEL, as a
#: regular expression's class body (``api.openapi`` writes it into every string's pattern).
PARAMETER_CONTROLS: Final = r"\x00-\x1f\x7f"
#: Those no string of a body document can hold: the same less tab and line breaks (free text,
#: such as a description, may span lines), and DEL.
DOCUMENT_CONTROLS: Final = r"\x00-\x08\x0b\x0c\x0e-\x1f"
#: Lone surrogates are no Unicode text either (a JSON escape can spell one).
_SURROGATES: Final = r"\ud800-\udfff"
_PARAMETER_BAD: Final = re.compile(f"[{PARAMETER_CONTROLS}{_SURROGATES}]")
_DOCUMENT_BAD: Final = re.compile(f"[{DOCUMENT_CONTROLS}{_SURROGATES}]")
_FORM: Final = "application/x-www-form-urlencoded"


def _named(where: str, name: str) -> InvalidInput:
    return InvalidInput(
        f"{where} {name!r} must not contain control characters (such as NUL)",
        details={"in": where, "name": name},
    )


def check_parameters(pairs: Iterable[tuple[str, str]], where: str) -> None:
    """Raise ``InvalidInput`` naming the first of ``pairs`` (name, value; a query string's or
    a form's) with a control character in its name or value."""
    for name, value in pairs:
        if _PARAMETER_BAD.search(name):
            raise _named(where, _PARAMETER_BAD.sub("?", name)[:64])
        if _PARAMETER_BAD.search(value):
            raise _named(where, name[:64])


def check_document(document: Any, where: str = "body") -> None:
    """Raise ``InvalidInput`` naming the first string (key or value) of a parsed JSON or YAML
    ``document`` that holds a control character other than tab and line breaks. Iterative and
    visiting each container once, so a deep or alias-heavy document costs its size only."""
    stack: list[tuple[str, Any]] = [("", document)]
    seen: set[int] = set()
    while stack:
        at, value = stack.pop()
        if isinstance(value, str):
            if _DOCUMENT_BAD.search(value):
                raise _field(where, at)
        elif isinstance(value, dict | list) and id(value) not in seen:
            seen.add(id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str) and _DOCUMENT_BAD.search(key):
                    raise _field(where, at)
                stack.append((f"{at}.{key}" if at else str(key), item))


def _field(where: str, at: str) -> InvalidInput:
    at = _DOCUMENT_BAD.sub("?", at)[:128]
    return InvalidInput(
        f"{where} field {at or '(the document)'!r} must not contain control characters "
        "(such as NUL)",
        details={"in": where, "name": at},
    )


def _media_type(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"content-type":
            media: str = value.decode("latin-1").split(";", 1)[0].strip().lower()
            return media
    return None


def _is_json(media: str | None) -> bool:
    # As FastAPI reads a body: JSON when it says so, or says nothing.
    return (
        media is None
        or media == "application/json"
        or (media.startswith("application/") and media.endswith("+json"))
    )


class TextGuard:
    """Refuses, with 400 ``invalid_input`` (or ``html``'s page on a browser's path), a
    request whose path, query parameters, form fields or JSON body strings hold a control
    character: such text is no label, name or value the product stores (PostgreSQL's text
    cannot hold NUL at all), so no route has to remember to check. Documents a route parses
    itself (YAML) go through ``check_document``. Sits inside ``BodyLimit``: the body it reads
    to check is already bounded."""

    def __init__(self, app: ASGIApp, html: HtmlErrors | None = None) -> None:
        self.app = app
        self.html = html

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            if _PARAMETER_BAD.search(scope["path"]):
                raise InvalidInput(
                    "the path must not contain control characters (such as NUL)",
                    details={"in": "path"},
                )
            query = scope["query_string"].decode("latin-1")
            check_parameters(parse_qsl(query, keep_blank_values=True), "query parameter")
            media = _media_type(scope)
            if scope["method"] in ("GET", "HEAD", "DELETE", "OPTIONS") and media is None:
                await self.app(scope, receive, send)
                return
            body, disconnected = await _read(receive)
            if disconnected:
                return
            _check_body(body, media)
        except InvalidInput as error:
            await self._refuse(scope, send, error)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _refuse(self, scope: Scope, send: Send, error: InvalidInput) -> None:
        if self.html is not None:
            request = Request(scope)
            page = await run_in_threadpool(
                self.html, request, error.http_status, error.message, error.details
            )
            if page is not None:
                await page(scope, _no_body, send)
                return
        await send_error(send, error)


def _check_body(body: bytes, media: str | None) -> None:
    if not body:
        return
    if media == _FORM:
        check_parameters(parse_qsl(body.decode("latin-1"), keep_blank_values=True), "form field")
    elif _is_json(media):
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            return  # not JSON: the route answers that
        check_document(document)


async def _read(receive: Receive) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"", True
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), False


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


async def _no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}
