"""Names a command module imports only when a command first uses them (#16).

``migrate = lazy_module("infersight.storage.migrate")`` at the top of a command module keeps
Alembic out of the commands that never migrate; ``lazy_attr("infersight.service.cost_spec",
"active_model")`` does the same for one function. Under ``TYPE_CHECKING`` the module imports
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
