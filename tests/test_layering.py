"""The package's import graph: no cycles, no streamlit (issue 8 item 9).

Every `import` in every deffcore module counts, including function-local ones (a local import
only postpones a cycle, it does not remove it); imports under `if TYPE_CHECKING:` do not run and
are skipped. An edge `a -> b` means module `a` imports module `b` (a package's `__init__` counts
as the module `deffcore` / `deffcore.labs` ...).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "deffcore"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> list[str]:
    """Every module name an import statement in `tree` names (absolute, dotted)."""
    names: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.append(base)
            # `from deffcore import cache` imports the submodule deffcore.cache
            names.extend(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        targets = set()
        for imported in _imported_names(tree, name, path.name == "__init__.py"):
            if imported in MODULES and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def _without_package_inits(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph without package `__init__` modules: `deffcore/__init__.py` maps public names to
    submodules lazily (PEP 562 `__getattr__`), so every module "imports" it by being inside it;
    that is not a layering edge."""
    packages = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    return {a: bs - packages for a, bs in graph.items() if a not in packages}


def test_the_graph_sees_local_and_relative_imports():
    # the checker itself: a function-local import and a relative import are edges
    tree = ast.parse("def f():\n    from deffcore.models import load_model\nfrom . import cache\n")
    names = _imported_names(tree, "deffcore.labs.x", is_package=False)
    assert "deffcore.models" in names and "deffcore.labs.cache" in names
    skipped = ast.parse("if TYPE_CHECKING:\n    import deffcore.cache\n")
    assert _imported_names(skipped, "deffcore.x", is_package=False) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_known_edges_are_found():
    graph = _graph()
    assert "deffcore.core.paths" in graph["deffcore.inputs.loading"]  # gemma3_gguf's local import
    assert "deffcore.inputs.interventions" in graph["deffcore.runs.measure"]


def test_no_import_cycles():
    cycles = _cycles(_without_package_inits(_graph()))
    assert not cycles, "import cycles among deffcore modules: " + "; ".join(
        " <-> ".join(c) for c in cycles
    )


@pytest.mark.parametrize("name", sorted(MODULES))
def test_deffcore_never_imports_streamlit(name):
    path = MODULES[name]
    tree = ast.parse(path.read_text(), filename=str(path))
    bad = [n for n in _imported_names(tree, name, path.name == "__init__.py") if n == "streamlit"]
    bad += [n for n in _imported_names(tree, name, False) if n.startswith("streamlit.")]
    assert not bad, f"{name} imports streamlit"


def test_paths_is_a_leaf():
    assert _graph()["deffcore.core.paths"] <= {"deffcore.core.errors"}
    assert _graph()["deffcore.core.errors"] == set()


def test_one_model_family():
    """`model_family` is defined once (deffcore.models_overview); pages and helpers import it."""
    sources = [*PKG.rglob("*.py"), *(ROOT / "pages").glob("*.py"), *ROOT.glob("*.py")]
    sources += [*(ROOT / "explorer").rglob("*.py")]
    defining = sorted(
        str(p.relative_to(ROOT))
        for p in sources
        if any(
            isinstance(node, ast.FunctionDef) and node.name == "model_family"
            for node in ast.walk(ast.parse(p.read_text(), filename=str(p)))
        )
    )
    assert defining == ["deffcore/views/models_overview.py"]


# ---------------------------------------------------------------------------------------------
# The app's layers: pages -> explorer -> deffcore; nothing imports a page (issue 18)
# ---------------------------------------------------------------------------------------------

APP_FILES: dict[str, Path] = {
    **{_module_name(p): p for p in sorted((ROOT / "explorer").rglob("*.py"))},
    **{f"pages.{p.stem}": p for p in sorted((ROOT / "pages").glob("*.py"))},
    "app": ROOT / "app.py",
}


def _imports_of(path: Path, name: str) -> list[str]:
    return _imported_names(ast.parse(path.read_text(), filename=str(path)), name, False)


def test_the_explorer_is_an_importable_package():
    assert (ROOT / "explorer" / "__init__.py").is_file()
    assert "explorer.page" in APP_FILES and "explorer.settings" in APP_FILES
    assert not (ROOT / "ui_common.py").exists()  # the grab-bag is gone


@pytest.mark.parametrize("name", sorted(MODULES))
def test_deffcore_never_imports_the_explorer_or_a_page(name):
    bad = [
        n
        for n in _imports_of(MODULES[name], name)
        if n.split(".")[0] in ("explorer", "pages", "app", "ui_common")
    ]
    assert not bad, f"{name} imports {bad}"


@pytest.mark.parametrize("name", sorted(APP_FILES))
def test_no_module_imports_a_page(name):
    """Pages are scripts the router runs (st.navigation), never modules to import: a page
    importing another would run its widgets twice. explorer/ and app.py import no page."""
    bad = [n for n in _imports_of(APP_FILES[name], name) if n.split(".")[0] in ("pages", "app")]
    assert not bad, f"{name} imports {bad}"


def test_the_layering_checks_catch_a_page_import():
    tree = "import pages.x\nfrom app import navigation\nfrom explorer.cards import show_figure\n"
    names = _imported_names(ast.parse(tree), "explorer.views", False)
    assert {"pages.x", "app", "explorer.cards"} <= set(names)


def test_the_design_map_names_every_module():
    """docs/DESIGN.md's map has a line for every module of deffcore/, its two sub-packages and
    explorer/ (a new module without a line on the map is a room nobody can find)."""
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    the_map = text[text.index("## The map") : text.index("## Conventions")]
    folders = [PKG, PKG / "figures", PKG / "sweep", ROOT / "explorer"]
    files = [p for folder in folders for p in sorted(folder.glob("*.py"))]
    missing = [
        str(p.relative_to(ROOT))
        for p in files
        if p.name not in ("__main__.py",) and f"{p.name} " not in the_map
    ]
    assert not missing, f"not on the map in docs/DESIGN.md: {missing}"
