"""The one JSON error shape, ``{"error": {"code", "message", "details"}}``, for every failure.

``core.errors.InfersightError`` maps to its own code and status; FastAPI's validation errors
become ``invalid_input``; HTTP errors from routing (404, 405) keep their status with a code of
their own; anything unexpected is logged and answered as ``internal`` without its details.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from core.errors import InfersightError, InvalidInput, Unauthorized

log = logging.getLogger(__name__)
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


async def _infersight_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, InfersightError)
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    return JSONResponse(exc.to_dict(), status_code=exc.http_status, headers=headers)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))}
        for e in exc.errors()
    ]
    return await _infersight_error(
        request, InvalidInput("the request is not valid", details={"problems": problems})
    )


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return JSONResponse(
        error_body(code, str(exc.detail)), status_code=exc.status_code, headers=exc.headers
    )


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=exc)
    return JSONResponse(error_body("internal", "internal server error"), status_code=500)


def install(app: FastAPI) -> None:
    app.add_exception_handler(InfersightError, _infersight_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
