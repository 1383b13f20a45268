"""The API fixtures (``tests.api.conftest``) for the profile pages and routes."""

from tests.api.conftest import api, make_api  # noqa: F401 (fixtures)
