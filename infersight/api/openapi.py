"""The OpenAPI document, made true to what the API does.

FastAPI's generated document says every operation may answer 422 ``HTTPValidationError``;
this API answers 400 with its one error shape (``api.errors``). ``install`` replaces the
generator with one that, for every operation:

* documents 400 ``ErrorBody`` (invalid input, or a ``Host`` the API does not answer to) in
  place of 422, 413 for a request body, 404 for a path that names a resource, 403 for a
  change (refused from another site, ``api.origin``, or for a token without the admin scope)
  and, with tokens configured, 401, 429 (too many unknown tokens, ``api.auth.FailureLimiter``)
  and the bearer security requirement;
* says of every string of a request (parameter or body) that it holds no control character,
  as ``api.limits.TextGuard`` enforces;
* declares the ``bearer`` security scheme (``Authorization: Bearer TOKEN``, scopes read and
  admin) and the ``session`` cookie scheme of the dashboard's pages (``/ui/``, not part of
  this document: the JSON API does not accept the cookie);
* lists optional query parameters as their type alone (``anyOf [T, null]`` would invite a
  literal ``null`` in a query string, where absence is the only null).

Routes state their own specifics (content types, 409, constraints) with ``responses=`` and
typed parameters; the snapshot test ``tests/api/test_openapi.py`` pins paths and parameters.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from infersight.api.auth import Scope
from infersight.api.dashboard.session import COOKIE
from infersight.api.errors import STATUS_MEANING, ErrorBody
from infersight.api.limits import DOCUMENT_CONTROLS, PARAMETER_CONTROLS
from infersight.api.origin import HOST_EXEMPT

_UNSAFE = {"post", "put", "patch", "delete"}
_ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}
_RETRY_AFTER = {
    "description": "Seconds until token checks from this client are answered again",
    "required": True,
    "schema": {"type": "integer", "minimum": 1},
}


def _scope_of(operation: dict[str, Any]) -> Scope | None:
    """The scope ``api.deps.requires`` put in the operation's bearer requirement."""
    scopes = {s for r in operation.get("security", []) for s in r.get("bearer", [])}
    order = (Scope.ADMIN, Scope.INGEST, Scope.READ)
    return next((scope for scope in order if scope.value in scopes), None)


def _error(status: int) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "description": STATUS_MEANING[status],
        "content": {"application/json": {"schema": _ERROR_REF}},
    }
    if status == 429:
        answer["headers"] = {"Retry-After": _RETRY_AFTER}
    return answer


def _strip_null(schema: dict[str, Any]) -> dict[str, Any]:
    options = schema.get("anyOf")
    if not isinstance(options, list):
        return schema
    kept = [o for o in options if o != {"type": "null"}]
    if len(kept) == len(options):
        return schema
    rest = {k: v for k, v in schema.items() if k != "anyOf"}
    return {**rest, **kept[0]} if len(kept) == 1 else {**rest, "anyOf": kept}


def _fix_operation(operation: dict[str, Any], method: str, auth: bool, host_checked: bool) -> None:
    scope = _scope_of(operation)
    responses: dict[str, Any] = operation.setdefault("responses", {})
    responses.pop("422", None)
    parameters = operation.get("parameters", [])
    wanted = set()
    if host_checked or parameters or "requestBody" in operation:
        wanted.add(400)
    if "requestBody" in operation:
        wanted.add(413)
    if any(p.get("in") == "path" for p in parameters):
        wanted.add(404)
    if method in _UNSAFE:
        wanted.add(403)
    if not auth:
        operation.pop("security", None)  # no tokens configured: nothing is required
    elif scope is not None:
        wanted.update((401, 429))  # 429: api.auth.FailureLimiter
        if scope is not Scope.READ:  # admin, ingest: a read token is refused
            wanted.add(403)
        operation["security"] = [{"bearer": [scope.value]}]
    for status in sorted(wanted):
        responses.setdefault(str(status), _error(status))
    for parameter in parameters:
        if parameter.get("in") == "query" and not parameter.get("required"):
            parameter["schema"] = _strip_null(parameter.get("schema", {}))


def _components(doc: dict[str, Any]) -> None:
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    error_schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(error_schema.pop("$defs", {}))
    schemas["ErrorBody"] = error_schema
    schemes = components.setdefault("securitySchemes", {})
    schemes.update(
        {
            "session": {
                "type": "apiKey",
                "in": "cookie",
                "name": COOKIE,
                "description": "The dashboard's session, set by signing in at /ui/login; "
                "it admits the dashboard's pages only, not this JSON API.",
            },
        }
    )


def _without_controls(pattern: str, controls: str) -> str:
    """``pattern`` with each ``\\s`` outside a character class narrowed to the whitespace that
    is not one of ``controls`` (the other patterns' classes name no control character)."""
    out, in_class, i = [], False, 0
    while i < len(pattern):
        part = pattern[i : i + 2] if pattern[i] == "\\" else pattern[i]
        i += len(part)
        if part == "[":
            in_class = True
        elif part == "]":
            in_class = False
        out.append(rf"[^\S{controls}]" if part == r"\s" and not in_class else part)
    return "".join(out)


def _text_only(schema: Any, schemas: dict[str, Any], controls: str, seen: set[str]) -> None:
    """Say in ``schema`` (a request's parameter or body, ``$ref`` followed into ``schemas``)
    what ``api.limits.TextGuard`` enforces: no string (nor an object's key) holds one of
    ``controls``; a string with a pattern of its own keeps it, narrowed where it says ``\\s``."""
    if isinstance(schema, list):
        for item in schema:
            _text_only(item, schemas, controls, seen)
        return
    if not isinstance(schema, dict):
        return
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
        name = ref.rsplit("/", 1)[1]
        if name not in seen and name in schemas:
            seen.add(name)
            _text_only(schemas[name], schemas, controls, seen)
        return
    if schema.get("type") == "string" and not {"enum", "const", "format"} & schema.keys():
        pattern = schema.get("pattern")
        schema["pattern"] = (
            f"^[^{controls}]*$" if pattern is None else _without_controls(pattern, controls)
        )
    if isinstance(schema.get("additionalProperties"), dict):
        schema.setdefault("propertyNames", {"pattern": f"^[^{controls}]*$"})
    for key in ("properties", "patternProperties"):
        for item in (schema.get(key) or {}).values():
            _text_only(item, schemas, controls, seen)
    for key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf", "prefixItems"):
        _text_only(schema.get(key), schemas, controls, seen)


def _text_parameters(doc: dict[str, Any]) -> None:
    """Every request string of ``doc`` says it holds no control character."""
    schemas = doc.get("components", {}).get("schemas", {})
    seen: set[str] = set()
    for item in doc.get("paths", {}).values():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                _text_only(parameter.get("schema"), schemas, PARAMETER_CONTROLS, set())
            for media in operation.get("requestBody", {}).get("content", {}).values():
                _text_only(media.get("schema"), schemas, DOCUMENT_CONTROLS, seen)


#: The areas ``/docs`` groups the operations by: each route module tags its router with one
#: (``tests/api/test_openapi_tags.py`` checks that every operation has one of these).
TAGS: Final = (
    ("queries", "Latency, throughput and breakdowns over a window, from rollups or raw rows"),
    ("slos", "Service level objectives and their live status"),
    ("incidents", "Incidents, their diagnosis and acknowledgement, silences"),
    ("cost", "The cost model, cost over a window and the weekly cost reports"),
    ("budgets", "Budgets: spend per period, its projection and burn rates"),
    ("purchasing", "Reserved / on-demand split and idle windows of the GPU fleet"),
    ("capacity", "Capacity plans from a load-test run or production"),
    ("scaling", "Replica recommendations and the KEDA metrics endpoint"),
    ("baselines", "Stored baselines and comparisons against them"),
    ("profiles", "Profiles of serving processes (py-spy through the sidecar), for incidents"),
    ("ingest", "Central ingest: sidecars ship their batches here"),
    ("health", "Readiness of this server and its store"),
)


def document(app: FastAPI, auth: bool) -> dict[str, Any]:
    doc = get_openapi(
        title=app.title,
        version=app.version,
        summary=app.summary,
        description=app.description,
        routes=app.routes,
        tags=[{"name": name, "description": text} for name, text in TAGS],
    )
    for path, item in doc.get("paths", {}).items():
        for method, operation in item.items():
            _fix_operation(operation, method, auth, path not in HOST_EXEMPT)
    _text_parameters(doc)
    _components(doc)
    return doc


def install(app: FastAPI, auth: bool) -> None:
    """Serve ``document(app, auth)`` at ``/openapi.json`` (built once, on first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(app, auth)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
