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


def _modules(folder: str) -> set[str]:
    return {p.stem for p in (ROOT / folder).glob("*.py") if p.stem != "__init__"}


def test_the_package_table_names_every_package_and_only_packages():
    table = _section("Packages and the dependency rule")
    named = set(re.findall(r"^\| `([a-z_]+)/` \|", table, re.M))
    packages = set(LINTER["root_packages"]) | {"dashboards"}
    assert named == packages
    assert all((ROOT / name / "__init__.py").is_file() for name in named)


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
    assert _modules("api/routes") == set(re.findall(r"`([a-z_]+)`", routes)) - {"api.params"}
    dashboard = edge[edge.index("`api/dashboard/`") : edge.index("The HTTP contract is pinned")]
    pages = dashboard[dashboard.index("one per page") :]
    listed_pages = set(re.findall(r"\(([a-z, ]+)\)", pages)[0].replace(" ", "").split(","))
    assert listed_pages == _modules("api/dashboard/views")
    for module in _modules("api/dashboard"):
        assert f"`{module}`" in dashboard, module
