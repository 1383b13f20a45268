"""The built wheel installs one package, ``infersight``, with its licence and full metadata, and
extras that match the roles (#33): the wheel is built from a copy of the project's own files
(``python -m build --wheel``, the same backend a release uses) and read back as a zip file."""

from __future__ import annotations

import ast
import email.parser
import functools
import importlib.metadata
import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Mapping
from email.message import Message
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from infersight import __version__

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"^[A-Za-z0-9_.-]+")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    # A copy of what the sdist holds, so that the build's own folders (build/, *.egg-info) are
    # written there and not into the working tree the other tests are reading.
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "infersight",
        source / "infersight",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    [built] = out.glob("*.whl")
    return zipfile.ZipFile(built)


def metadata(wheel: zipfile.ZipFile) -> Message:
    [path] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return email.parser.Parser().parsestr(wheel.read(path).decode("utf-8"))


def requirements(meta: Message, extra: str) -> set[str]:
    """The distributions an extra brings, following the extras that name infersight's own."""
    found: set[str] = set()
    for line in meta.get_all("Requires-Dist") or []:
        requirement, _, marker = line.partition(";")
        if f'extra == "{extra}"' not in marker:
            continue
        name = NAME.match(requirement.strip())
        assert name is not None, line
        if name.group() == "infersight":
            inner = requirement[requirement.index("[") + 1 : requirement.index("]")]
            for other in inner.split(","):
                found |= requirements(meta, other.strip())
        else:
            found.add(name.group().lower())
    return found


def test_the_wheel_installs_one_package_and_its_dist_info(wheel: zipfile.ZipFile) -> None:
    top = {name.split("/", 1)[0] for name in wheel.namelist()}
    assert top == {"infersight", f"infersight-{__version__}.dist-info"}
    entry_points = next(n for n in wheel.namelist() if n.endswith("dist-info/entry_points.txt"))
    assert "infersight = infersight.cli:main" in wheel.read(entry_points).decode()


def test_the_wheel_carries_the_licence_and_full_metadata(wheel: zipfile.ZipFile) -> None:
    licence = f"infersight-{__version__}.dist-info/licenses/LICENSE"
    assert "Apache License" in wheel.read(licence).decode()
    assert (ROOT / "LICENSE").read_text().startswith(wheel.read(licence).decode()[:200])
    meta = metadata(wheel)
    assert meta["Version"] == __version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["License-File"] == "LICENSE"
    assert meta["Description-Content-Type"] == "text/markdown"
    assert "## Quick start" in meta.get_payload()
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls)
    assert all(u.startswith("https://") for u in urls.values())
    classifiers = meta.get_all("Classifier") or []
    assert len(classifiers) >= 10
    assert "Topic :: System :: Monitoring" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers


def test_the_extras_match_the_roles(wheel: zipfile.ZipFile) -> None:
    meta = metadata(wheel)
    extras = set(meta.get_all("Provides-Extra") or [])
    assert {"sidecar", "server", "loadtest", "dev", "all"} <= extras
    sidecar, server = requirements(meta, "sidecar"), requirements(meta, "server")
    assert {"grpcio", "opentelemetry-proto", "nvidia-ml-py"} <= sidecar
    assert "fastapi" not in sidecar
    assert {"fastapi", "apscheduler", "jinja2"} <= server
    assert "grpcio" not in server
    assert "locust" in requirements(meta, "loadtest")
    # the demo install (`all`) is every role on one box: no load-test engine, no test tools
    demo = requirements(meta, "all")
    assert sidecar | server <= demo
    assert not demo & {"locust", "gevent", "flask", "pyzmq", "pytest"}
    # CI installs `.[all,dev]`: the tests need every role and the locust engine
    assert demo | {"locust", "pytest", "kubernetes-validate"} <= requirements(meta, "dev")
    # the names of earlier releases still install what they did
    assert requirements(meta, "collector") == sidecar
    assert requirements(meta, "api") == server
    assert "locust" in requirements(meta, "locust")


# What each role runs: its command's modules and every package they import (the composition
# root's group and settings included). Every third-party module they import, at the top of a
# file or inside a function, must come with the role's extra (or the core dependencies), or
# with what those depend on; `pip install 'infersight[ROLE]'` alone must run the role.
ROLES = {
    "sidecar": (
        ["collector", "httpd", "core", "config", "storage"],
        ["cli/__init__.py", "cli/group.py", "cli/settings.py", "cli/commands_sidecar.py"],
    ),
    "server": (
        ["api", "service", "storage", "alerts", "config", "httpd", "core", "migrations"],
        ["cli/__init__.py", "cli/group.py", "cli/settings.py", "cli/commands_serve.py"],
    ),
}


def _imports(paths: list[Path]) -> set[str]:
    """Every module the files import by name: ``from a.b import c`` names ``a.b`` and, where
    ``c`` is a module, ``a.b.c`` (in a namespace package such as ``google`` only the module
    tells which distribution it comes from)."""
    found: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
                found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _closure(requirements: list[str]) -> set[str]:
    """The distributions the requirements bring, with what they depend on (installed here)."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in seen or name == "infersight":
            continue
        seen.add(name)
        try:
            lines = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed here: nothing of ours can import from it
        for line in lines:
            inner = Requirement(line)
            if inner.marker is None or inner.marker.evaluate({"extra": ""}):
                todo.append(inner)
    return seen


@pytest.mark.parametrize("role", list(ROLES))
def test_each_role_runs_on_its_extra_alone(role: str) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    allowed = _closure(project["dependencies"] + project["optional-dependencies"][role])
    packages, modules = ROLES[role]
    paths = [p for package in packages for p in (ROOT / "infersight" / package).rglob("*.py")]
    paths += [ROOT / "infersight" / module for module in modules]
    missing = {}
    for module in sorted(_imports(paths)):
        top = module.split(".", maxsplit=1)[0]
        if top in sys.stdlib_module_names or top == "infersight":
            continue
        owner = _owner(module)
        if owner is not None and canonicalize_name(owner) not in allowed:
            missing[module] = owner
    assert not missing, f"infersight[{role}] lacks {missing}"


@functools.cache
def _top_levels() -> Mapping[str, list[str]]:
    return importlib.metadata.packages_distributions()


@functools.cache
def _files(distribution: str) -> frozenset[str]:
    found = importlib.metadata.distribution(distribution)
    return frozenset(str(found.locate_file(file)) for file in found.files or [])


def _owner(module: str) -> str | None:
    """The distribution that installed the module (``None``: not a module, or a namespace)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    # a top-level name may be shared (the namespace package google.*): ask each candidate
    candidates = _top_levels().get(module.split(".", maxsplit=1)[0], [])
    return next((c for c in candidates if spec.origin in _files(c)), None)
