"""Loading a benchmark script from ``bench/`` as a module, for the smoke tests that run them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` as module ``name``, loaded once per test session.

    ``bench/`` joins ``sys.path`` as it does when a benchmark runs as a script, so one
    benchmark imports another's helpers (``import bench_storage``) either way.
    """
    if name in sys.modules:
        return sys.modules[name]
    if str(BENCH_DIR) not in sys.path:
        sys.path.append(str(BENCH_DIR))
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
