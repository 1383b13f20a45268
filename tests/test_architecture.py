"""docs/architecture.md stays true to the code: its package table, its list of import
contracts and its rooms (use cases, route modules, dashboard pages) against what exists."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
LINTER = PYPROJECT["tool"]["importlinter"]


def _section(title: str) -> str:
    start = DOC.index(f"\n## {title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end != -1 else len(DOC)]


PACKAGE = ROOT / "infersight"


def _modules(folder: str) -> set[str]:
    return {p.stem for p in (PACKAGE / folder).glob("*.py") if p.stem != "__init__"}


def _subpackages() -> set[str]:
    return {p.parent.name for p in PACKAGE.glob("*/__init__.py")}


def test_one_namespace_is_installed():
    """The wheel installs ``infersight`` and nothing else at the top level (#31)."""
    assert LINTER["root_packages"] == ["infersight"]
    assert PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"] == ["infersight*"]
    stray = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"infersight", "tests"}
    assert not stray, f"top-level packages outside the namespace: {sorted(stray)}"


def test_the_package_table_names_every_package_and_only_packages():
    table = _section("Packages and the dependency rule")
    named = set(re.findall(r"^\| `([a-z_]+)/` \|", table, re.M))
    assert named == _subpackages()


def test_every_contract_names_packages_that_exist():
    for contract in LINTER["contracts"]:
        for key in ("source_modules", "forbidden_modules", "modules"):
            for module in contract.get(key, []):
                parts = module.removesuffix(".*").split(".")
                assert parts[0] == "infersight", module
                path = ROOT.joinpath(*parts)
                assert path.is_dir() or path.with_suffix(".py").is_file(), module


def test_every_import_contract_is_listed_and_every_listed_contract_exists():
    table = _section("Packages and the dependency rule")
    listed = set(re.findall(r"^- (.+)$", table, re.M))
    contracts = {c["name"] for c in LINTER["contracts"]}
    assert listed == contracts


def test_every_use_case_module_has_its_row():
    table = _section("The use-case layer (`service/`)")
    named = set()
    for cell in re.findall(r"^\| ([^|]+) \|", table, re.M):
        named |= set(re.findall(r"`([a-z_]+)`", cell))
    assert _modules("service") <= named
    assert named <= _modules("service")


def test_every_route_module_and_dashboard_page_is_named():
    edge = _section("The HTTP edge (`api/`)")
    routes = edge[edge.index("`api/routes/`") : edge.index("`api/dashboard/`")]
    assert _modules("api/routes") == set(re.findall(r"`([a-z_]+)`", routes)) - {
        "infersight.api.params"
    }
    dashboard = edge[edge.index("`api/dashboard/`") : edge.index("The HTTP contract is pinned")]
    pages = dashboard[dashboard.index("one per page") :]
    listed_pages = set(re.findall(r"\(([a-z, ]+)\)", pages)[0].replace(" ", "").split(","))
    assert listed_pages == _modules("api/dashboard/views")
    for module in _modules("api/dashboard"):
        assert f"`{module}`" in dashboard, module
