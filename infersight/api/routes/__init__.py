"""The JSON API's routes, one module per resource; ``api.app`` includes their routers.

A route parses its request, calls ``storage`` or the use-case layer (``service``) and shapes the
answer. Route modules never import each other (an import-linter contract): what two of them
share lives in ``service`` or in ``api``'s own helpers (``api.params``, ``api.deps``).
"""
