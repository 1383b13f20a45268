"""The infersight API service: FastAPI app factory, routes, auth, jobs and Prometheus export.

``create_app(settings, engine, clock)`` builds everything from its arguments; nothing here
happens at import time. The CLI's ``infersight serve`` is the composition root that calls it.
"""

from api.app import create_app

__all__ = ["create_app"]
