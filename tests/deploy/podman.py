"""Building and running the project's image with podman, for the deployment tests (#33).

No registry is reachable from these machines, so the image's base is made here from Debian's
packages (``mmdebstrap``, or ``debootstrap`` where only that is installed) and imported with
``podman import`` under a tag named after its recipe: a second run, or another test, reuses it.
The image itself is then built from the repository's Containerfile with that base as its
``BASE`` argument, the package index pip is configured with here as its ``PIP_INDEX_URL``, and
this machine's CA bundle as a build secret (never a layer). podman runs as Debian packages it on
these hosts: ``runc`` as its runtime, no default ulimits (crun and the default ulimits fail on
their cgroups). That is written to a ``containers.conf`` of the tests' own, never the machine's.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = """\
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""
#: What the base image is made of: Debian's Python 3.11 and its venv module, CA certificates.
SUITE = "bookworm"
PACKAGES = ("python3", "python3-venv", "ca-certificates")
#: Documentation and translations stay out of the base (mmdebstrap only).
EXCLUDED = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*", "/usr/share/info/*")
MIRROR = os.environ.get("INFERSIGHT_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
#: The files the image is built from (the Containerfile's COPY lines and .containerignore).
IMAGE_INPUTS = ("Containerfile", ".containerignore", "pyproject.toml", "README.md", "LICENSE")
#: Long operations (debootstrap, pip inside the build) are bounded only against a hang.
BUILD_TIMEOUT_S = 1200
#: The tests' images are tagged by their inputs' digest.
TEST_TAG = "localhost/infersight:test-"


def require_podman() -> None:
    """Skip (fail in CI, where .ci/run installs them) when podman or a bootstrapper is absent."""
    missing = [name for name in ("podman", "runc") if shutil.which(name) is None]
    if shutil.which("mmdebstrap") is None and shutil.which("debootstrap") is None:
        missing.append("mmdebstrap or debootstrap")
    if missing:
        reason = (
            f"{', '.join(missing)} not installed (Debian packages: podman runc mmdebstrap): "
            "the image is built and run with podman"
        )
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def podman_env(conf_dir: Path) -> dict[str, str]:
    """The environment podman runs in: the tests' own containers.conf."""
    conf = conf_dir / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


@dataclass(frozen=True)
class Podman:
    env: dict[str, str]

    def run(
        self, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["podman", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"podman {' '.join(args[:3])} … exited {done.returncode}:\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done

    def exists(self, image: str) -> bool:
        return self.run("image", "exists", image, check=False).returncode == 0

    def logs(self, name: str) -> str:
        done = self.run("logs", name, check=False)
        return done.stdout + done.stderr


def base_tag() -> str:
    recipe = "\n".join([SUITE, MIRROR, *PACKAGES, *EXCLUDED, "minbase"])
    return f"localhost/infersight-base:{SUITE}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


def base_image(podman: Podman) -> str:
    """The Debian base image, made and imported unless its tag is there already."""
    tag = base_tag()
    if podman.exists(tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="infersight-base-") as work:
        tarball = Path(work) / "rootfs.tar"
        include = ",".join(PACKAGES)
        if shutil.which("mmdebstrap"):
            command = ["mmdebstrap", "--variant=minbase", f"--include={include}"]
            command += [f"--dpkgopt=path-exclude={path}" for path in EXCLUDED]
            command += [SUITE, str(tarball), MIRROR]
        else:
            rootfs = Path(work) / "rootfs"
            command = ["debootstrap", "--variant=minbase", f"--include={include}", SUITE]
            command += [str(rootfs), MIRROR]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        if not tarball.exists():
            subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
        podman.run("import", str(tarball), tag, timeout=BUILD_TIMEOUT_S)
    return tag


def pip_index() -> tuple[str, str]:
    """The package index (and extra indexes) pip is configured with here, for the build."""

    def config(key: str) -> str:
        done = subprocess.run(
            ["pip", "config", "get", key], capture_output=True, text=True, check=False
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    index = os.environ.get("PIP_INDEX_URL") or config("global.index-url")
    extra = os.environ.get("PIP_EXTRA_INDEX_URL") or config("global.extra-index-url")
    # Only indexes a container can reach: file:// ones lie on this machine's disk.
    extras = " ".join(u for u in extra.split() if not u.startswith("file:"))
    return index or "https://pypi.org/simple", extras


def ca_bundle() -> Path | None:
    """The CA bundle pip trusts here (a TLS-inspecting proxy's root included), if any."""
    for candidate in (os.environ.get("PIP_CERT"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def image_tag() -> str:
    """A tag named after the image's inputs (the build's own cache does the rest)."""
    digest = hashlib.sha256()
    for name in IMAGE_INPUTS:
        digest.update((ROOT / name).read_bytes())
    for path in sorted((ROOT / "infersight").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(ROOT)).encode())
            digest.update(path.read_bytes())
    return f"{TEST_TAG}{digest.hexdigest()[:12]}"


@contextmanager
def building() -> Iterator[None]:
    """One build at a time on this machine: tests of other files (pytest-xdist workers) that
    want the same image wait for it instead of building it twice."""
    with open(Path(tempfile.gettempdir()) / "infersight-image-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_image(podman: Podman) -> str:
    """The project's image, built from the Containerfile on the Debian base."""
    with building():
        return _build_image(podman)


def _build_image(podman: Podman) -> str:
    tag = image_tag()
    if podman.exists(tag):
        return tag
    index, extra = pip_index()
    args = ["build", "--network", "host", "-f", str(ROOT / "Containerfile"), "-t", tag]
    args += ["--build-arg", f"BASE={base_image(podman)}"]
    args += ["--build-arg", f"PIP_INDEX_URL={index}", "--build-arg", f"PIP_EXTRA_INDEX_URL={extra}"]
    bundle = ca_bundle()
    if bundle is not None:
        args += ["--secret", f"id=pip-cert,src={bundle}"]
    podman.run(*args, str(ROOT), timeout=BUILD_TIMEOUT_S)
    # Earlier builds' images (of other versions of the code) go; the build cache stays.
    listed = podman.run("images", "--format", "{{.Repository}}:{{.Tag}}", "localhost/infersight")
    stale = [t for t in listed.stdout.split() if t.startswith(TEST_TAG) and t != tag]
    if stale:
        podman.run("rmi", *stale, check=False)
    return tag


@contextmanager
def container(
    podman: Podman, image: str, args: Sequence[str], options: Sequence[str] = ()
) -> Iterator[str]:
    """A detached container of ``image`` running ``args`` on the host's network; its name.
    Its output is printed when the test fails (pytest shows captured stdout)."""
    name = f"infersight-test-{uuid.uuid4().hex[:10]}"
    podman.run("run", "-d", "--name", name, "--network", "host", *options, image, *args)
    try:
        yield name
    finally:
        print(f"--- podman logs {name}\n{podman.logs(name)[-6000:]}")
        podman.run("rm", "-f", "-v", "-t", "10", name, check=False)


def running(podman: Podman, name: str) -> bool:
    done = podman.run("inspect", "-f", "{{.State.Running}}", name, check=False)
    return done.stdout.strip() == "true"
