"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), served from this server: they work offline.

FastAPI's own pages load Swagger UI and ReDoc from a CDN (and ReDoc's fonts from Google), so on
a host without internet they stay blank. Here the scripts and the stylesheet come from the
``fastapi_offline`` package's files at ``/docs/assets/``, Swagger UI is started by a script of
ours (``dashboards/static/swagger-init.js``) rather than an inline one, and each page's
Content-Security-Policy admits exactly that: scripts, styles and fetches from this origin
only (styles inline too: both UIs set them from their scripts), images from here or ``data:``.
"""

from __future__ import annotations

import html
from functools import cache
from importlib import resources
from typing import Final

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from infersight.core.errors import NotFound

router = APIRouter(include_in_schema=False)

#: What ``/docs/assets/{name}`` serves: its package, its path in it and its media type.
ASSETS: Final = {
    "swagger-ui-bundle.js": ("fastapi_offline", "static/swagger-ui-bundle.js", "text/javascript"),
    "swagger-ui.css": ("fastapi_offline", "static/swagger-ui.css", "text/css"),
    "redoc.standalone.js": ("fastapi_offline", "static/redoc.standalone.js", "text/javascript"),
    "swagger-init.js": ("infersight.dashboards", "static/swagger-init.js", "text/javascript"),
}
#: The policy of both pages: nothing from elsewhere, no inline script, no framing.
CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def _page(title: str, head: str, body: str) -> HTMLResponse:
    return HTMLResponse(
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<title>{title} · infersight API</title>\n<link rel="icon" href="data:,">\n'
        f"{head}</head>\n<body>\n{body}</body>\n</html>\n",
        headers=_HEADERS,
    )


def _root(request: Request) -> str:
    return html.escape(str(request.scope.get("root_path", "")), quote=True)


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    root = _root(request)
    return _page(
        "Swagger UI",
        f'<link rel="stylesheet" href="{root}/docs/assets/swagger-ui.css">\n',
        f'<div id="swagger-ui" data-openapi-url="{root}/openapi.json"></div>\n'
        f'<script src="{root}/docs/assets/swagger-ui-bundle.js"></script>\n'
        f'<script src="{root}/docs/assets/swagger-init.js"></script>\n',
    )


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    root = _root(request)
    return _page(
        "ReDoc",
        "",
        f'<redoc spec-url="{root}/openapi.json"></redoc>\n'
        f'<script src="{root}/docs/assets/redoc.standalone.js"></script>\n',
    )


@cache
def _asset(name: str) -> bytes:
    package, path, _ = ASSETS[name]
    return resources.files(package).joinpath(path).read_bytes()


@router.get("/docs/assets/{name}")
def asset(name: str) -> Response:
    if name not in ASSETS:
        raise NotFound(f"no documentation asset {name!r}")
    media = f"{ASSETS[name][2]}; charset=utf-8"
    return Response(
        _asset(name),
        media_type=media,
        headers={"Cache-Control": "max-age=86400", "X-Content-Type-Options": "nosniff"},
    )
