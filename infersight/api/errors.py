"""The one JSON error shape, ``{"error": {"code", "message", "details"}}``, for every failure.

``core.errors.InfersightError`` maps to its own code and status; FastAPI's validation errors
become ``invalid_input``; HTTP errors from routing (404, 405) keep their status with a code of
their own; anything unexpected is logged and answered as ``internal`` without its details.

A browser's path (the dashboard's) is answered by an HTML page instead: ``install`` takes an
``HtmlErrors`` (``api.dashboard.routes.error_page``) that renders one for such a request, or
returns ``None`` for the JSON shape.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, Final

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.types import Send

from infersight.core.errors import InfersightError, InvalidInput, Unauthorized, Unavailable

log = logging.getLogger(__name__)
#: Seconds a 503 ``unavailable`` asks the client to wait before retrying.
UNAVAILABLE_RETRY_AFTER_S: Final = 5
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large", 429: "rate_limited"}
#: ``(request, status, message, details)`` → an HTML page for a browser's path, or ``None``.
HtmlErrors = Callable[[Request, int, str, dict[str, Any]], Response | None]


async def send_error(send: Send, error: InfersightError) -> None:
    """Answer ``error`` in the JSON error shape from ASGI middleware (below FastAPI's
    exception handlers: body limits, origin and host checks)."""
    body = json.dumps(error.to_dict()).encode()
    await send(
        {
            "type": "http.response.start",
            "status": error.http_status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class ErrorDetail(BaseModel):
    code: str = Field(description="stable, machine-readable: invalid_input, not_found, …")
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ErrorBody(BaseModel):
    """The one error shape of every failure (documented for every operation)."""

    error: ErrorDetail


#: What each error status means, as the OpenAPI document says it.
STATUS_MEANING: dict[int, str] = {
    400: "Invalid input (the error names the parameter; no parameter, form field or body "
    "string may hold a control character such as NUL), or an unknown Host",
    401: "No bearer token, or an unknown one",
    403: "The token lacks the admin scope, or a change was sent from another site",
    404: "Not found",
    409: "Conflicts with what is stored",
    413: "Request body too large",
    429: "Too many unknown tokens from this client, or from all clients, in the last minute: "
    "every token check waits the Retry-After seconds",
}


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: ``statuses`` answered with ``ErrorBody``."""
    return {s: {"model": ErrorBody, "description": STATUS_MEANING[s]} for s in statuses}


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


async def _infersight_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, InfersightError)
    headers = None
    if isinstance(exc, Unauthorized):
        headers = {"WWW-Authenticate": "Bearer"}
    elif isinstance(exc, Unavailable) and exc.code == "unavailable":  # when to come back
        headers = {"Retry-After": str(UNAVAILABLE_RETRY_AFTER_S)}
    return JSONResponse(exc.to_dict(), status_code=exc.http_status, headers=headers)


#: What a parameter pattern means in words, for error messages (``described``).
_PATTERN_MEANINGS: dict[str, str] = {}


def described(pattern: str, meaning: str) -> str:
    """Register ``pattern``'s meaning ("must be …") for validation errors; returns it."""
    _PATTERN_MEANINGS[pattern] = meaning
    return pattern


def _problem(error: Any) -> dict[str, Any]:
    message = str(error.get("msg", ""))
    pattern = (error.get("ctx") or {}).get("pattern")
    if error.get("type") == "string_pattern_mismatch" and pattern in _PATTERN_MEANINGS:
        message = f"must be {_PATTERN_MEANINGS[pattern]}"
    return {"loc": [str(p) for p in error.get("loc", ())], "msg": message}


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = [_problem(e) for e in exc.errors()]
    message = "the request is not valid"
    if len(problems) == 1 and problems[0]["loc"]:
        message += f": {problems[0]['loc'][-1]} {problems[0]['msg']}"
    return await _infersight_error(request, InvalidInput(message, details={"problems": problems}))


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at the request's path (Starlette's 405 names only the
    first route that matched the path, e.g. POST where GET is served too)."""
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(r.matches({**request.scope, "method": method})[0] is Match.FULL for r in routes)
    ]


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request))
    return JSONResponse(
        error_body(code, str(exc.detail)), status_code=exc.status_code, headers=headers
    )


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=exc)
    return JSONResponse(error_body("internal", "internal server error"), status_code=500)


Handler = Callable[[Request, Exception], Any]


def or_html(handler: Handler, html: HtmlErrors) -> Handler:
    """``handler``, unless ``html`` renders a page for the request (a browser's path)."""

    async def answer(request: Request, exc: Exception) -> Response:
        json_response: Response = await handler(request, exc)
        body = json.loads(bytes(json_response.body))["error"]
        page = html(request, json_response.status_code, body["message"], body["details"])
        if page is None:
            return json_response
        for name in ("allow", "www-authenticate", "retry-after"):
            if name in json_response.headers:
                page.headers[name] = json_response.headers[name]
        return page

    return answer


def install(app: FastAPI, html: HtmlErrors | None = None) -> None:
    """The error shape for ``app``; with ``html``, a browser's path gets its page instead."""
    handlers: dict[type[Exception], Handler] = {
        InfersightError: _infersight_error,
        RequestValidationError: _validation_error,
        HTTPException: _http_error,
        Exception: _unexpected,
    }
    for kind, handler in handlers.items():
        app.add_exception_handler(kind, handler if html is None else or_html(handler, html))
