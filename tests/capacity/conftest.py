"""The API fixtures (an app over the session's stores) for the capacity endpoint's tests."""

from tests.api.conftest import api, make_api

__all__ = ["api", "make_api"]
