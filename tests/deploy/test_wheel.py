"""The built wheel installs one package, ``infersight``, with its licence and full metadata, and
extras that match the roles (#33): the wheel is built from a copy of the project's own files
(``python -m build --wheel``, the same backend a release uses) and read back as a zip file."""

from __future__ import annotations

import email.parser
import re
import shutil
import subprocess
import sys
import zipfile
from email.message import Message
from pathlib import Path

import pytest

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
