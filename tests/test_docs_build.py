"""The reference under docs/ builds as a site, strictly (issue #33): a link to a page or an
anchor that does not exist, or a page left out of the nav, fails the build and this test."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
         "--site-dir", str(site)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_docs_build_strictly_with_every_page_in_the_nav(tmp_path: Path) -> None:
    done = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr
    pages = {p.relative_to(ROOT / "docs") for p in (ROOT / "docs").rglob("*.md")}
    built = {p.relative_to(tmp_path / "site") for p in (tmp_path / "site").rglob("index.html")}
    for page in pages:
        folder = page.parent if page.stem in ("index", "README") else page.with_suffix("")
        assert folder / "index.html" in built, page


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The gate itself: the same configuration over a copy of docs/ with one dead link."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "index.md"
    page.write_text(page.read_text() + "\nSee [the missing page](no-such-page.md).\n")
    done = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr
