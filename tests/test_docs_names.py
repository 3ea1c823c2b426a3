"""Every deffcore name that the README, a docs page or the quickstart notebook shows exists.

From the code of every Python example (run or not) and every notebook code cell:
`from deffcore import X`, `from deffcore.<module> import X`, `import deffcore.<module>` and
each attribute read off the package (`dc.X`, `deffcore.X`, after `import deffcore as dc`).
From the prose of the pages this project writes (not the SPEC or the design notes): every
`dc.X`, and every dotted `deffcore.<...>` path, which must import or resolve. The public API
is `deffcore.__all__`; the examples keep to it, so moving a module breaks no example.
"""

from __future__ import annotations

import ast
import importlib
import json
import re

import pytest
from docs_pages import REPO, all_blocks, own_pages

import deffcore

NOTEBOOKS = sorted((REPO / "docs").rglob("*.ipynb"))


def _python_sources() -> list[tuple[str, str]]:
    """(where, code) of every Python example and notebook code cell."""
    found = [(b.where, b.code) for b in all_blocks() if b.language == "python"]
    for nb in NOTEBOOKS:
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        for i, cell in enumerate(cells):
            if cell["cell_type"] == "code":
                found.append((f"{nb.relative_to(REPO)} cell {i}", "".join(cell["source"])))
    return found


def _resolves(dotted: str) -> bool:
    """Whether `deffcore.a.b...` names an importable module or an attribute of one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def names_used(code: str) -> set[str]:
    """Dotted deffcore paths that `code` imports or reads (`deffcore.measure`, ...)."""
    tree = ast.parse(code)
    aliases = {"deffcore"}
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "deffcore":
                    used.add(alias.name)
                    if alias.asname and alias.name == "deffcore":
                        aliases.add(alias.asname)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "deffcore":
            used.update(f"{node.module}.{alias.name}" for alias in node.names)
    for node in ast.walk(tree):
        is_read = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        if is_read and node.value.id in aliases:
            used.add(f"deffcore.{node.attr}")
    return used


@pytest.mark.parametrize(("where", "code"), _python_sources(), ids=lambda v: str(v)[:40])
def test_every_deffcore_name_an_example_uses_exists(where, code):
    missing = sorted(name for name in names_used(code) if not _resolves(name))
    assert not missing, f"{where} uses {missing}, which deffcore does not have"


_PROSE_DC = re.compile(r"\bdc\.(?P<name>[A-Za-z_]\w*)")
_PROSE_PATH = re.compile(r"\bdeffcore(?:\.[A-Za-z_]\w*)+")


def test_every_deffcore_name_the_prose_shows_exists():
    for page in ["README.md", *own_pages()]:
        text = (REPO / page).read_text(encoding="utf-8")
        for match in _PROSE_DC.finditer(text):
            assert hasattr(deffcore, match["name"]), f"{page}: dc.{match['name']} does not exist"
        for match in _PROSE_PATH.finditer(text):
            assert _resolves(match[0]), f"{page}: {match[0]} does not exist"


def test_the_check_sees_imports_attributes_and_aliases():
    code = (
        "import deffcore as dc\nfrom deffcore.views.sharing import nothing_here\n"
        "dc.no_such_name(1)\n"
    )
    assert names_used(code) == {
        "deffcore",
        "deffcore.views.sharing.nothing_here",
        "deffcore.no_such_name",
    }
    assert _resolves("deffcore.measure") and _resolves("deffcore.similarity_matrix")
    assert not _resolves("deffcore.views.run_view.headline_changes")  # the README's old example
    assert not _resolves("deffcore.no_such_module.x")
