"""The house, measured from the code (issue 31, "What it must show").

Reads a checkout's ``infersight/`` package with ``ast`` (nothing is imported) and prints:

* **the import graph**: modules, internal import edges (distinct importer → imported pairs,
  every ``import`` counted: at load time, inside a function, under ``TYPE_CHECKING``), the
  layer rank of each top-level package derived from ``pyproject.toml``'s import-linter
  contracts (``layer_ranks``: P stands above Q when Q may not import P but P may import Q),
  the imports running back up (to a package of higher rank), the direct imports a
  ``forbidden`` contract forbids (``lint-imports``' verdict, without its indirect chains), and the
  cycles: strongly connected components of more than one module, over every import and over
  the imports that run when a module loads;
* **edge → storage import pairs**: (module of ``infersight.cli``, ``infersight.api.routes``
  or ``infersight.api.dashboard``) × (``infersight.storage`` module it imports directly),
  with how many of those pairs have an import at load time, inside a function and under
  ``TYPE_CHECKING`` (a pair may have several);
* **the path of a burn to a Slack message**, measured by running it: the end-to-end test
  ``BURN_TEST`` (the evaluator opens an incident on an SLO burn, the listener diagnoses it and
  enqueues the pages in the outbox, the delivery job posts them to a fake Slack and PagerDuty)
  under ``bench/harness/calltrace.py``, which records every call from an
  ``infersight.service`` frame into an ``infersight.storage`` frame (each comes back into
  the service): the distinct (service function → storage function) call sites and the
  transitions, leaving out the app's construction (``--no-trace`` skips it), and the narrower
  count of those made by the listener's and the announcer's own methods (``LISTENERS``) on
  the evaluation's path;
* **the longest functions** (top 10 by lines, decorators left out);
* **near-identical code**: the ``duplicates`` command's totals over the package and its top
  identical (not shape-only) pairs;
* **what an extension touches**: the files of ``infersight/``, ``tests/``, ``bench/`` and
  ``docs/`` that a new dashboard page, cause rule and document kind would be added to, found
  from an existing one (``PAGE``, ``CAUSE``, ``KIND``): the files that import the page's view
  module or name its route, its template or (the design document) it in the list of pages;
  the files that name the cause; the files that name the kind, and those that import a module
  holding the kind's name as a string.

    python bench/house.py [--tree DIR] [--json OUT] [--no-trace]
    python bench/house.py --tree /tmp/before --compare . [--json OUT] [--markdown]

With ``--compare`` it measures both trees and prints a before → after table of the headline
figures after each tree's report. ``static(tree)`` is the part without the trace or the
``duplicates`` command (``tests/test_house.py`` runs it).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CALLTRACE = Path(__file__).resolve().parent / "harness" / "calltrace.py"
PACKAGE = "infersight"
EDGES = ("infersight.cli", "infersight.api.routes", "infersight.api.dashboard")
STORAGE = "infersight.storage"
#: The end-to-end test the burn's path is measured on (present in both trees; SQLite store).
BURN_TEST = (
    "tests/api/test_diagnose_notify.py::"
    "test_a_page_reaches_every_notifier_once_with_its_diagnosis[sqlite]"
)
#: The objects that decide and announce a page (their own methods' calls into the store on the
#: evaluation's path are the issue's narrower count: 9 before).
LISTENERS = ("DiagnosisListener.", "Announcer.")
EVALUATION = "infersight.service.evaluation:Evaluator.run"
#: Entries of the trace that are the app's construction, not the burn's path.
CONSTRUCTION = ("infersight.api.app:create_app",)
#: The existing extensions a new one is measured on.
PAGE = "capacity"
CAUSE = "preprocessing_slow"
KIND = "ScalingPolicy"
#: This measurement's own files, which name the extensions it looks for.
OWN = {"bench/house.py", "tests/test_house.py"}
TEXT_SUFFIXES = {".py", ".html", ".yaml", ".yml", ".md", ".json", ".js", ".css", ".toml", ".txt"}
AREAS = ("infersight", "tests", "bench", "docs")

# -- reading the package -------------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    in_function: bool
    type_checking: bool

    @property
    def at_load(self) -> bool:
        return not self.in_function and not self.type_checking


@dataclass
class Function:
    module: str
    qualname: str
    line: int
    lines: int


@dataclass
class Package:
    tree: Path
    modules: dict[str, Path] = field(default_factory=dict)
    imports: list[Import] = field(default_factory=list)
    functions: list[Function] = field(default_factory=list)


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Reader(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool, modules: set[str]) -> None:
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.modules = modules
        self.imports: list[Import] = []
        self.functions: list[Function] = []
        self._scope: list[str] = []
        self._functions = 0
        self._type_checking = 0

    def _add(self, target: str, line: int) -> None:
        if target in self.modules and target != self.module:
            self.imports.append(
                Import(self.module, target, line, self._functions > 0, self._type_checking > 0)
            )

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(self._nearest(alias.name), node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            origin = ".".join([*base, node.module] if node.module else base)
        else:
            origin = node.module or ""
        for alias in node.names:
            name = f"{origin}.{alias.name}"
            # ``from pkg import sub`` imports the submodule; ``from mod import name``, the module.
            self._add(name if name in self.modules else self._nearest(origin), node.lineno)

    def _nearest(self, dotted: str) -> str:
        while dotted and dotted not in self.modules:
            dotted = dotted.rpartition(".")[0]
        return dotted

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._type_checking += 1
            for child in node.body:
                self.visit(child)
            self._type_checking -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._scope.append(node.name)
        end = node.end_lineno or node.lineno
        self.functions.append(
            Function(self.module, ".".join(self._scope), node.lineno, end - node.lineno + 1)
        )
        self._functions += 1
        self.generic_visit(node)
        self._functions -= 1
        self._scope.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scope.append(node.name)
        self.generic_visit(node)
        self._scope.pop()


def read_package(tree: Path) -> Package:
    found = Package(tree)
    paths = sorted((tree / PACKAGE).rglob("*.py"))
    found.modules = {module_name(tree, p): p for p in paths}
    names = set(found.modules)
    for name, path in found.modules.items():
        reader = _Reader(name, path.name == "__init__.py", names)
        reader.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        found.imports += reader.imports
        found.functions += reader.functions
    return found


# -- layers from the import contracts -----------------------------------------------------------


def top_package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def _contracts(tree: Path) -> list[dict[str, Any]]:
    config = tomllib.loads((tree / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def layer_ranks(tree: Path, packages: Iterable[str]) -> dict[str, int]:
    """Each top-level package's rank, from the ``forbidden`` contracts between top-level
    packages: P stands above Q when Q may not import P but P may import Q (two packages that
    may not import each other stand side by side); a package's rank is one above the highest
    it stands above, 0 for one that stands above none (``httpd``, the data-only packages)."""
    packages = set(packages)
    forbids: dict[str, set[str]] = defaultdict(set)
    for contract in _contracts(tree):
        if contract.get("type") != "forbidden":
            continue
        for source in contract["source_modules"]:
            if source in packages:  # a contract on a subpackage or a pattern ranks nothing
                forbids[source] |= {m for m in contract["forbidden_modules"] if m in packages}
    above = {p: {q for q in packages if p in forbids[q] and q not in forbids[p]} for p in packages}
    rank: dict[str, int] = {}

    def rank_of(package: str, seen: frozenset[str]) -> int:
        if package not in rank:
            below = [q for q in above[package] if q not in seen]
            seen = seen | {package}
            rank[package] = 1 + max((rank_of(q, seen) for q in below), default=-1)
        return rank[package]

    for package in sorted(packages):
        rank_of(package, frozenset())
    return rank


def _pattern(expression: str) -> re.Pattern[str]:
    """An import-linter module expression (``*`` one name, ``**`` one or more) as a regex."""
    parts = []
    for part in expression.split("."):
        parts.append(
            r"[^.]+(?:\.[^.]+)*" if part == "**" else r"[^.]+" if part == "*" else re.escape(part)
        )
    return re.compile(r"\.".join(parts))


def _covers(expression: re.Pattern[str], module: str) -> bool:
    """Whether ``module`` or a package it is in matches (a contract covers descendants)."""
    parts = module.split(".")
    return any(expression.fullmatch(".".join(parts[:n])) for n in range(1, len(parts) + 1))


def forbidden_imports(tree: Path, pairs: Iterable[tuple[str, str]]) -> list[str]:
    """The direct imports that a ``forbidden`` contract forbids (its ``ignore_imports`` apart):
    ``lint-imports``'s verdict on direct imports, at load time, in functions and under
    ``TYPE_CHECKING`` alike."""
    contracts = []
    for contract in _contracts(tree):
        if contract.get("type") != "forbidden":
            continue
        ignored = []
        for line in contract.get("ignore_imports", []):
            source, _, target = line.partition("->")
            ignored.append((_pattern(source.strip()), _pattern(target.strip())))
        contracts.append(
            (
                [_pattern(m) for m in contract["source_modules"]],
                [_pattern(m) for m in contract["forbidden_modules"]],
                ignored,
            )
        )
    found = set()
    for source, target in pairs:
        for sources, forbidden, ignored in contracts:
            if (
                any(_covers(p, source) for p in sources)
                and any(_covers(p, target) for p in forbidden)
                and not any(s.fullmatch(source) and t.fullmatch(target) for s, t in ignored)
            ):
                found.add(f"{source} -> {target}")
    return sorted(found)


# -- the graph ------------------------------------------------------------------------------------


def strongly_connected(nodes: Iterable[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components, iteratively; only those of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def graph_figures(found: Package) -> dict[str, Any]:
    packages = {top_package(m) for m in found.modules if m != PACKAGE} | {PACKAGE}
    rank = layer_ranks(found.tree, packages)
    pairs: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for imp in found.imports:
        pairs[(imp.source, imp.target)].append(imp)
    upward = sorted(f"{s} -> {t}" for s, t in pairs if rank[top_package(t)] > rank[top_package(s)])
    forbidden = forbidden_imports(found.tree, pairs)
    every: dict[str, set[str]] = defaultdict(set)
    at_load: dict[str, set[str]] = defaultdict(set)
    for (s, t), imps in pairs.items():
        every[s].add(t)
        if any(i.at_load for i in imps):
            at_load[s].add(t)
    cycles = strongly_connected(found.modules, every)
    load_cycles = strongly_connected(found.modules, at_load)
    return {
        "modules": len(found.modules),
        "import_edges": len(pairs),
        "import_edges_at_load": sum(len(v) for v in at_load.values()),
        "ranks": dict(sorted(rank.items(), key=lambda kv: (kv[1], kv[0]))),
        "imports_back_up": upward,
        "imports_forbidden": forbidden,
        "import_pairs": sorted(f"{s} -> {t}" for s, t in pairs),
        "cycles": cycles,
        "cycles_at_load": load_cycles,
    }


def edge_storage(found: Package) -> dict[str, Any]:
    pairs: dict[tuple[str, str], set[str]] = defaultdict(set)
    for imp in found.imports:
        if any(_within(imp.source, e) for e in EDGES) and _within(imp.target, STORAGE):
            kind = (
                "type_checking"
                if imp.type_checking
                else ("in_function" if imp.in_function else "at_load")
            )
            pairs[(imp.source, imp.target)].add(kind)
    by_edge = {e: sum(1 for s, _ in pairs if _within(s, e)) for e in EDGES}
    by_kind = {
        k: sum(1 for kinds in pairs.values() if k in kinds)
        for k in ("at_load", "in_function", "type_checking")
    }
    only_type_checking = sum(1 for kinds in pairs.values() if kinds == {"type_checking"})
    at_load_by_edge = {
        e: sum(1 for (s, _), kinds in pairs.items() if _within(s, e) and "at_load" in kinds)
        for e in EDGES
    }
    return {
        "pairs": len(pairs),
        "by_edge": by_edge,
        "by_kind": by_kind,
        "at_load_by_edge": at_load_by_edge,
        "only_type_checking": only_type_checking,
        "edge_modules": len({s for s, _ in pairs}),
        "list": sorted(f"{s} -> {t}" for s, t in pairs),
    }


def longest(found: Package, most: int = 10) -> list[dict[str, Any]]:
    ranked = sorted(found.functions, key=lambda f: (-f.lines, f.module, f.qualname))[:most]
    return [
        {"function": f"{f.module}:{f.qualname}", "line": f.line, "lines": f.lines} for f in ranked
    ]


# -- what an extension touches --------------------------------------------------------------------


def _text_files(tree: Path) -> dict[str, str]:
    """The text of every file of the areas an extension may touch, by path in the tree."""
    found = {}
    for area in AREAS:
        for path in sorted((tree / area).rglob("*")):
            relative = path.relative_to(tree).as_posix()
            if (
                path.is_file()
                and path.suffix in TEXT_SUFFIXES
                and "__pycache__" not in path.parts
                and relative not in OWN
            ):
                found[relative] = path.read_text(encoding="utf-8", errors="replace")
    return found


def _importers(texts: dict[str, str], module: str) -> set[str]:
    """The Python files that import ``module`` (any form, any scope)."""
    parent, _, name = module.rpartition(".")
    pattern = re.compile(
        rf"(from\s+{re.escape(parent)}\s+import\s+\(?[^)]*?\b{re.escape(name)}\b)"
        rf"|(\b{re.escape(module)}\b)",
        re.S,
    )
    return {path for path, text in texts.items() if path.endswith(".py") and pattern.search(text)}


def _holds_string(path: Path, value: str) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(n, ast.Constant) and n.value == value for n in ast.walk(tree))


def _naming(texts: dict[str, str], patterns: Iterable[str]) -> set[str]:
    compiled = [re.compile(p) for p in patterns]
    return {path for path, text in texts.items() if any(c.search(text) for c in compiled)}


def extensions(tree: Path) -> dict[str, list[str]]:
    texts = _text_files(tree)
    view = f"infersight.api.dashboard.views.{PAGE}"
    page = _importers(texts, view) | _naming(
        texts,
        [
            rf"/ui/{PAGE}\b",
            rf"\b{PAGE}\.html\b",
            rf"dashboard/views/{PAGE}\.py",
            # the design document's list of pages (its test holds it to the views)
            rf"one per page\s*\([a-z,\s]*\b{PAGE}\b",
        ],
    )
    page |= {f"infersight/api/dashboard/views/{PAGE}.py"}
    template = tree / "infersight" / "dashboards" / "templates" / f"{PAGE}.html"
    if template.is_file():
        page.add(str(template.relative_to(tree)))
    cause = _naming(texts, [rf"\b{CAUSE}\b"])
    kind = _naming(texts, [rf"[\"']{KIND}[\"']", rf"kind:\s*{KIND}\b", rf"`{KIND}`"])
    # and the files that import a module holding the kind's name as a string (its reader)
    for path in sorted(kind):
        if path.startswith(f"{PACKAGE}/") and path.endswith(".py"):
            holder = module_name(tree, tree / path)
            if _holds_string(tree / path, KIND):
                kind |= _importers(texts, holder)
    return {
        f"dashboard page (like {PAGE})": sorted(page),
        f"cause rule (like {CAUSE})": sorted(cause),
        f"document kind (like {KIND})": sorted(kind),
    }


def static(tree: Path) -> dict[str, Any]:
    """The figures read from the code alone (no test run, no other command)."""
    found = read_package(tree)
    return {
        "tree": str(tree),
        "graph": graph_figures(found),
        "edge_storage": edge_storage(found),
        "longest_functions": longest(found),
        "functions_over_100_lines": sum(1 for fn in found.functions if fn.lines > 100),
        "extensions": extensions(tree),
    }


# -- what runs: duplicates and the burn's trace -------------------------------------------------

_TOTALS = re.compile(
    r"(?P<pairs>\d+) pairs of places \((?P<files>\d+) files read\).*?"
    r"\((?P<shape>\d+) by shape alone, (?P<boilerplate>\d+) of those marked boilerplate\)"
)


_ROW = re.compile(r"D\d+ (?P<a>\S+):(?P<a0>\d+)-(?P<a1>\d+) ~ (?P<b>\S+):(?P<b0>\d+)-(?P<b1>\d+)")
#: A side whose lines are at least this share of signatures, docstrings, declarations and
#: forwarding calls repeats a shape (a protocol's method, its implementation and the function it
#: delegates to), no logic.
DECLARATION_SHARE = 0.75
#: The shared lines that make a ``duplicates`` pair (passed to it, and printed with its totals).
MIN_LINES = 6


def _forwards(call: ast.Call) -> bool:
    """Whether a call only hands names on (``f(self._engine, a, c=c)``: a delegate)."""
    values = [*call.args, *(k.value for k in call.keywords)]
    values = [v.value if isinstance(v, ast.Starred) else v for v in values]
    return len(values) > 1 and all(
        isinstance(v, ast.Name) or (isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name))
        for v in values
    )


def _declaration_lines(path: Path) -> set[int]:
    """Lines of ``path`` that declare rather than compute: function signatures, docstrings,
    annotated names and class-level fields, ``...`` bodies, imports, and calls that only hand
    their caller's names on."""
    found: set[int] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            found.update(range(node.lineno, node.body[0].lineno))
            for decorator in node.decorator_list:
                found.update(range(decorator.lineno, (decorator.end_lineno or 0) + 1))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            found.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        if isinstance(node, ast.Call) and _forwards(node):
            found.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        if isinstance(node, ast.AnnAssign | ast.Import | ast.ImportFrom | ast.ClassDef):
            end = node.lineno if isinstance(node, ast.ClassDef) else node.end_lineno
            found.update(range(node.lineno, (end or node.lineno) + 1))
    return found


def _repeats_logic(package: Path, row: str) -> bool:
    """Whether a ``duplicates`` row's shared lines compute something on either side."""
    match = _ROW.match(row)
    if match is None:
        return True
    for side in ("a", "b"):
        path = package / match[side]
        if path.suffix != ".py":
            return True
        lines = path.read_text(encoding="utf-8").splitlines()
        first, last = int(match[f"{side}0"]), int(match[f"{side}1"])
        wanted = [n for n in range(first, last + 1) if lines[n - 1].strip()]
        declared = _declaration_lines(path)
        if sum(1 for n in wanted if n in declared) < DECLARATION_SHARE * len(wanted):
            return True
    return False


def duplicates(tree: Path, top: int = 8) -> dict[str, Any]:
    """The ``duplicates`` command's totals over the package; its identical rows split into
    those that repeat logic and those that repeat declarations and forwarding only."""
    command = shutil.which("duplicates")
    if command is None:
        return {"error": "the duplicates command is not on PATH"}
    arguments = ["--repo", str(tree / PACKAGE), "--min-lines", str(MIN_LINES), "--most", "200"]
    run = subprocess.run(
        [command, *arguments, "--seconds", "300"],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = run.stdout.splitlines()
    totals = _TOTALS.search(lines[0]) if lines else None
    if totals is None:
        return {"error": (lines[0] if lines else run.stderr.strip()) or "no output"}
    pairs, shape = int(totals["pairs"]), int(totals["shape"])
    rows = [line for line in lines[1:] if re.match(r"D\d+ ", line)]
    identical = [row for row in rows if " shape" not in row]
    logic = [row for row in identical if _repeats_logic(tree / PACKAGE, row)]
    return {
        "pairs": pairs,
        "identical": pairs - shape,
        "identical_listed": len(identical),
        "identical_logic": len(logic),
        "shape_only": shape,
        "boilerplate": int(totals["boilerplate"]),
        "files": int(totals["files"]),
        "top_identical": identical[:top],
        "top_logic": logic[:top],
        "notes": [line for line in lines if line.startswith(("left out:", "incomplete:"))],
    }


def burn_trace(tree: Path, test: str = BURN_TEST) -> dict[str, Any]:
    """Runs ``test`` in ``tree`` (first on PYTHONPATH) under the call-trace plugin."""
    loader = (
        "import importlib.util as u, sys, pytest; "
        f"s = u.spec_from_file_location('calltrace', {str(CALLTRACE)!r}); "
        "m = u.module_from_spec(s); s.loader.exec_module(m); "
        "sys.exit(pytest.main(sys.argv[1:], plugins=[m]))"
    )
    with tempfile.TemporaryDirectory(prefix="house-") as scratch:
        out = Path(scratch) / "trace.json"
        env = {**os.environ, "PYTHONPATH": str(tree), "INFERSIGHT_CALLTRACE_OUT": str(out)}
        run = subprocess.run(
            [sys.executable, "-c", loader, "-q", "-p", "no:cacheprovider", test],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if not out.is_file():
            return {"error": f"the test did not run (exit {run.returncode}): {run.stdout[-2000:]}"}
        found = json.loads(out.read_text(encoding="utf-8"))
    expected = str((tree / PACKAGE / "__init__.py").resolve())
    if (
        found["infersight_file"] is None
        or str(Path(found["infersight_file"]).resolve()) != expected
    ):
        return {"error": f"imported {found['infersight_file']}, not {expected}"}
    outcomes = set(found["outcomes"].values())
    calls = [c for c in found["calls"] if c["entry"] not in CONSTRUCTION]
    entries: dict[str, int] = defaultdict(int)
    for call in calls:
        entries[call["entry"]] += call["count"]
    return {
        "test": test,
        "passed": outcomes == {"passed"},
        "infersight": found["infersight_file"],
        "call_sites": len({(c["caller"], c["callee"]) for c in calls}),
        "transitions": sum(c["count"] for c in calls),
        "service_functions": len({c["caller"] for c in calls}),
        "storage_functions": len({c["callee"] for c in calls}),
        "by_entry": dict(sorted(entries.items())),
        "sites_by_module": _sites_by_module(calls),
        "listener_sites": sorted(
            {
                f"{c['caller']} -> {c['callee']}"
                for c in calls
                if c["entry"] == EVALUATION and c["caller"].partition(":")[2].startswith(LISTENERS)
            }
        ),
        "construction_call_sites": len(
            {(c["caller"], c["callee"]) for c in found["calls"] if c["entry"] in CONSTRUCTION}
        ),
        "sites": sorted(f"{c['caller']} -> {c['callee']} x{c['count']}" for c in calls),
    }


def _sites_by_module(calls: list[dict[str, Any]]) -> dict[str, int]:
    """Distinct call sites per calling service module."""
    sites: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for call in calls:
        sites[call["caller"].partition(":")[0]].add((call["caller"], call["callee"]))
    return {module: len(found) for module, found in sorted(sites.items())}


def measure(tree: Path, trace: bool) -> dict[str, Any]:
    figures = static(tree)
    figures["duplicates"] = duplicates(tree)
    if trace:
        figures["burn"] = burn_trace(tree)
    return figures


# -- printing ------------------------------------------------------------------------------------


def report(f: dict[str, Any]) -> None:
    print(f"== {f['tree']}")
    _report_graph(f["graph"], f["edge_storage"])
    _report_burn(f.get("burn"))
    _report_code(f)


def _report_graph(g: dict[str, Any], e: dict[str, Any]) -> None:
    print("layer ranks (from pyproject.toml's import-linter contracts; 0 = bottom):")
    by_rank: dict[int, list[str]] = defaultdict(list)
    for package, rank in g["ranks"].items():
        by_rank[rank].append(package.removeprefix("infersight.") or package)
    for rank in sorted(by_rank):
        print(f"  {rank}: {', '.join(sorted(by_rank[rank]))}")
    print(
        f"import graph: {g['modules']} modules, {g['import_edges']} internal import edges "
        f"({g['import_edges_at_load']} at load time)"
    )
    print(f"  imports running back up a layer: {len(g['imports_back_up'])}")
    for line in g["imports_back_up"]:
        print(f"    {line}")
    print(f"  imports a contract forbids: {len(g['imports_forbidden'])}")
    for line in g["imports_forbidden"]:
        print(f"    {line}")
    for label, key in (("every import", "cycles"), ("imports at load time", "cycles_at_load")):
        cycles = g[key]
        members = sum(len(c) for c in cycles)
        print(f"  cycles over {label}: {len(cycles)} ({members} modules)")
        for cycle in cycles:
            print(f"    {', '.join(cycle)}")
    print(
        f"edge -> storage import pairs: {e['pairs']} "
        + ", ".join(f"{k.removeprefix('infersight.')} {v}" for k, v in e["by_edge"].items())
        + f"; pairs with an import at load time {e['by_kind']['at_load']}, in a function "
        f"{e['by_kind']['in_function']}, under TYPE_CHECKING {e['by_kind']['type_checking']}"
        f" (only under TYPE_CHECKING {e['only_type_checking']}); {e['edge_modules']} edge modules"
    )


def _report_burn(burn: dict[str, Any] | None) -> None:
    if burn is None:
        return
    if "error" in burn:
        print(f"burn -> Slack trace: {burn['error']}")
        return
    print(
        f"burn -> Slack ({burn['test']}, {'passed' if burn['passed'] else 'FAILED'}; "
        f"infersight from {burn['infersight']}):"
    )
    print(
        f"  distinct service -> storage call sites {burn['call_sites']} "
        f"({burn['service_functions']} service functions, {burn['storage_functions']} "
        f"storage functions); transitions {burn['transitions']}; left out, the app's "
        f"construction: {burn['construction_call_sites']} call sites"
    )
    for entry, count in burn["by_entry"].items():
        print(f"  under {entry}: {count} transitions")
    for module, count in burn["sites_by_module"].items():
        print(f"  call sites from {module}: {count}")
    print(
        f"  of those, the listener's and the announcer's own methods' on the evaluation's "
        f"path: {len(burn['listener_sites'])}"
    )
    for site in burn["sites"]:
        print(f"    {site}")


def _report_code(f: dict[str, Any]) -> None:
    print("longest functions:")
    for fn in f["longest_functions"]:
        print(f"  {fn['lines']:4d}  {fn['function']} (line {fn['line']})")
    d = f.get("duplicates")
    if d is not None:
        if "error" in d:
            print(f"duplicates: {d['error']}")
        else:
            print(
                f"duplicates (min {MIN_LINES} lines, {d['files']} files): {d['pairs']} pairs, "
                f"{d['identical']} identical, {d['shape_only']} shape only "
                f"({d['boilerplate']} of those boilerplate)"
            )
            print(
                f"  identical rows listed {d['identical_listed']}, of which repeat logic "
                f"{d['identical_logic']} (the rest, on both sides at least "
                f"{DECLARATION_SHARE:.0%} signatures, docstrings, declarations, forwarding calls);"
                " top identical:"
            )
            for row in d["top_identical"]:
                print(f"    {row}")
            print("  top identical that repeat logic:")
            for row in d["top_logic"]:
                print(f"    {row}")
            for note in d["notes"]:
                print(f"    {note}")
    print("files a new extension touches (named like an existing one):")
    for what, files in f["extensions"].items():
        print(f"  {what}: {len(files)}")
        for path in files:
            print(f"    {path}")


def headline(f: dict[str, Any]) -> dict[str, Any]:
    g, e = f["graph"], f["edge_storage"]
    row: dict[str, Any] = {
        "modules": g["modules"],
        "internal import edges": g["import_edges"],
        "imports running back up a layer": len(g["imports_back_up"]),
        "imports a contract forbids": len(g["imports_forbidden"]),
        "cycles (every import)": len(g["cycles"]),
        "modules in cycles (every import)": sum(len(c) for c in g["cycles"]),
        "cycles (at load time)": len(g["cycles_at_load"]),
        "edge -> storage import pairs": e["pairs"],
        "  from cli": e["by_edge"]["infersight.cli"],
        "  from api.routes": e["by_edge"]["infersight.api.routes"],
        "  from api.dashboard": e["by_edge"]["infersight.api.dashboard"],
        "  with an import at load time": e["by_kind"]["at_load"],
    }
    burn = f.get("burn")
    if burn and "error" not in burn:
        row["burn: service -> storage call sites"] = burn["call_sites"]
        row["burn: service -> storage transitions"] = burn["transitions"]
        row["burn: storage functions called"] = burn["storage_functions"]
        row["burn: listener + announcer call sites"] = len(burn["listener_sites"])
    row["longest function (lines)"] = f["longest_functions"][0]["lines"]
    row["functions over 100 lines"] = f["functions_over_100_lines"]
    d = f.get("duplicates")
    if d and "error" not in d:
        row["duplicate pairs"] = d["pairs"]
        row["  identical"] = d["identical"]
        row["  identical, repeating logic"] = d["identical_logic"]
        row["  shape only (not boilerplate)"] = d["shape_only"] - d["boilerplate"]
    for what, files in f["extensions"].items():
        code = sum(1 for path in files if path.startswith(f"{PACKAGE}/"))
        row[f"files: {what}"] = f"{len(files)} ({code})"
    return {k: v for k, v in row.items() if v is not None}


def table(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """The headline figures of two trees, with the later tree's contracts over the earlier
    tree's imports (what the new rules rule out)."""
    b, a = headline(before), headline(after)
    earlier = [tuple(p.split(" -> ", 1)) for p in before["graph"]["import_pairs"]]
    ruled_out = forbidden_imports(Path(after["tree"]), earlier)
    key = "imports the later tree's contracts forbid"
    b[key], a[key] = len(ruled_out), len(after["graph"]["imports_forbidden"])
    return [(k, b.get(k, "-"), a.get(k, "-")) for k in b | a]


def compare(before: dict[str, Any], after: dict[str, Any], markdown: bool = False) -> None:
    rows = table(before, after)
    print(f"== before -> after ({before['tree']} -> {after['tree']})")
    print("(files an extension touches: all of them, those under infersight/ in brackets)")
    if markdown:
        print("| figure | before | after |\n|---|---:|---:|")
        for key, was, now in rows:
            name = f"… {key.strip()}" if key.startswith("  ") else key
            print(f"| {name} | {was} | {now} |")
        return
    width = max(len(key) for key, _, _ in rows)
    print(f"{'':{width}}  {'before':>8}  {'after':>8}")
    for key, was, now in rows:
        print(f"{key:{width}}  {was!s:>8}  {now!s:>8}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout to measure")
    parser.add_argument("--compare", type=Path, help="a second checkout: print before -> after")
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    parser.add_argument("--no-trace", action="store_true", help="skip the burn's traced run")
    parser.add_argument(
        "--markdown", action="store_true", help="with --compare: the table in Markdown"
    )
    args = parser.parse_args(argv)
    trees = [args.tree.resolve()] + ([args.compare.resolve()] if args.compare else [])
    results = []
    for tree in trees:
        if not (tree / PACKAGE).is_dir() or not (tree / "pyproject.toml").is_file():
            parser.error(f"{tree} is not an infersight checkout")
        figures = measure(tree, trace=not args.no_trace)
        report(figures)
        results.append(figures)
    if len(results) == 2:
        compare(results[0], results[1], markdown=args.markdown)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
