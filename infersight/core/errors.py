"""The one error hierarchy of infersight.

Every error that crosses a package boundary is one of these, so that the API can map it to
one JSON shape (``{"error": {"code", "message", "details"}}``) and the CLI to one exit code::

    InfersightError                 code            HTTP  meaning
    ├── InvalidInput                invalid_input    400  malformed or out-of-range input
    │   └── InvalidRecord           invalid_record   400  a request / sample record fails validation
    ├── NotFound                    not_found        404  a named object does not exist
    ├── Conflict                    conflict         409  the object exists or changed underneath
    ├── Unauthorized                unauthorized     401  missing or wrong credentials
    ├── Forbidden                   forbidden        403  credentials lack the scope
    ├── TooLarge                    too_large        413  a body or batch exceeds a configured cap
    ├── Unavailable                 unavailable      503  a dependency is down or full; retry later
    │   └── SchemaMissing           no_schema        503  the store answers but was never migrated
    └── ConfigurationError          configuration    500  the operator's settings are inconsistent

IO boundaries report *expected* failures as result values (``WriteResult``, ``ShipResult``);
these exceptions are for invalid input and for states a caller must handle explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar


class InfersightError(Exception):
    """Base of every infersight error; carries a stable machine-readable code."""

    code: ClassVar[str] = "internal"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str, *, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})

    def to_dict(self) -> dict[str, Any]:
        """The body of the shared JSON error shape."""
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}


class InvalidInput(InfersightError):
    code = "invalid_input"
    http_status = 400


class InvalidRecord(InvalidInput):
    code = "invalid_record"


class NotFound(InfersightError):
    code = "not_found"
    http_status = 404


class Conflict(InfersightError):
    code = "conflict"
    http_status = 409


class Unauthorized(InfersightError):
    code = "unauthorized"
    http_status = 401


class Forbidden(InfersightError):
    code = "forbidden"
    http_status = 403


class TooLarge(InfersightError):
    code = "too_large"
    http_status = 413


class Unavailable(InfersightError):
    code = "unavailable"
    http_status = 503


class SchemaMissing(Unavailable):
    """The store answers but has no schema (``infersight db upgrade`` creates it)."""

    code = "no_schema"


class ConfigurationError(InfersightError):
    code = "configuration"
    http_status = 500
