"""Names a command module imports only when a command first uses them (#16).

``yaml = lazy_module("yaml")`` at the top of a command module keeps the YAML parser out of the
commands that never print YAML; ``lazy_attr("infersight.service.cost_spec", "active_model")``
does the same for one function. Under ``TYPE_CHECKING`` the module imports
the real names instead, so that the type checker sees them.
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class _LazyModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        module = importlib.import_module(self.__name__)
        self.__dict__.update(module.__dict__)
        return getattr(module, name)


def lazy_module(name: str) -> Any:
    """A stand-in for the module ``name`` that imports it on first attribute access."""
    return _LazyModule(name)


def lazy_attr(module: str, name: str) -> Any:
    """A stand-in for the callable ``module.name`` that imports it on first call."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call
