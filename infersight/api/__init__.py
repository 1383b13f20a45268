"""The infersight API service, the HTTP edge of the use-case layer (``service``).

``create_app(settings, store, clock)`` (``api.app``) builds everything from its arguments;
nothing here happens at import time. The CLI's ``infersight serve`` is the composition root that
calls it. ``api.routes`` holds the JSON routes (one module a resource), ``api.dashboard`` the web
pages; both receive the app's ``AppContext`` (``api.context``) through ``api.deps``.
"""

from infersight.api.app import create_app

__all__ = ["create_app"]
