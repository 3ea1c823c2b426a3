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
import io
import json
import re
import tokenize
from pathlib import Path

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


# ---------------------------------------------------------------------------------------------
# The code's own citations: SPEC sections and module paths that exist, never a tracker's numbers

#: What the code's comments and docstrings are read from: the library, the app, the scripts,
#: the benchmarks and the tests.
CODE_FOLDERS = ("deffcore", "explorer", "pages", "scripts", "benchmarks", "tests")
#: The word "issue" (or "issues") and a number: a tracker the repository does not hold.
_ISSUE = re.compile(r"\bissues?\s+#?\d", re.IGNORECASE)
_CODE_PATH = re.compile(r"(?<![\w./])deffcore/[\w/]+\.py\b")
_CODE_DOTTED = re.compile(r"(?<![\w./])deffcore(?:\.[A-Za-z_]\w*)+")


def _code_files() -> list[Path]:
    files = [REPO / "app.py"]
    for top in CODE_FOLDERS:
        files += sorted(p for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts)
    return files


def _comments_and_strings(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and string literal (docstrings included) of `source`."""
    kinds = {tokenize.COMMENT, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", -1)}
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(tok.start[0], tok.string) for tok in tokens if tok.type in kinds]


def cited_issues(source: str) -> list[str]:
    """`line: text` of each comment or string of `source` that cites an issue number."""
    return [
        f"{line}: {_ISSUE.search(text)[0]}"
        for line, text in _comments_and_strings(source)
        if _ISSUE.search(text)
    ]


def missing_modules(source: str) -> list[str]:
    """Every `deffcore/x/y.py` path and `deffcore.x.y` name the comments and strings of
    `source` cite that does not exist (`deffcore.figures.X`, one capital letter, stands for
    any name and is not checked)."""
    missing = []
    for line, text in _comments_and_strings(source):
        missing += [
            f"{line}: {m[0]}" for m in _CODE_PATH.finditer(text) if not (REPO / m[0]).is_file()
        ]
        for match in _CODE_DOTTED.finditer(text):
            name = match[0]
            placeholder = re.fullmatch(r"[A-Z]", name.rsplit(".", 1)[-1])
            if "__main__" not in name and not placeholder and not _resolves(name):
                missing.append(f"{line}: {name}")
    return missing


def test_the_checks_see_issue_numbers_and_missing_modules_in_comments_and_docstrings():
    number = "2" + "3"
    code = (
        f'"""The live line (Issue {number}, SPEC 14)."""\n'
        f"x = 1  # see issues {number}-31\n"
        f"issue{number} = 2\n"  # a name, not a citation
        '"""SPEC 14: deffcore/statistics/anytime.py and deffcore.statistics.anytime."""\n'
        '"""Gone: deffcore/paired.py, deffcore.paired, deffcore.supply.passages_action."""\n'
    )
    assert [c.split(":")[0] for c in cited_issues(code)] == ["1", "2"]
    assert missing_modules(code) == [
        "5: deffcore/paired.py",
        "5: deffcore.paired",
        "5: deffcore.supply.passages_action",
    ]


@pytest.mark.parametrize("path", _code_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_the_code_cites_spec_sections_never_issue_numbers(path):
    """Docstrings and comments cite docs/SPEC.md's sections; an issue number points into a
    tracker the repository does not hold."""
    found = cited_issues(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(REPO)} cites issues: {found}"


@pytest.mark.parametrize(
    "path",
    [p for p in _code_files() if p.parts[len(REPO.parts)] != "tests"],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_every_module_the_code_cites_exists(path):
    """A docstring or comment naming `deffcore/x/y.py` or `deffcore.x.y` names one that
    exists (the tests are left out: they name missing modules on purpose)."""
    missing = missing_modules(path.read_text(encoding="utf-8"))
    assert not missing, f"{path.relative_to(REPO)} cites modules that do not exist: {missing}"


# ---------------------------------------------------------------------------------------------
# docs/DESIGN.md: the map on one page, naming only what exists

DESIGN = REPO / "docs" / "DESIGN.md"
DESIGN_MAX_LINES = 150
#: A path in backticks (`inputs/run_spec.py`, `work/sweep/`, `.streamlit/config.toml`), and a
#: module on the run's route (`    runs/measure   ...`, `extraction/atlas_*`).
_DESIGN_PATH = re.compile(r"`([\w.*-]*/[\w./*-]*|[\w./*-]+\.(?:py|json|csv|sh|toml|md))`")
_ROUTE_STOP = re.compile(r"^ {4}([a-z_]+/[\w*]+)\s", re.MULTILINE)


def design_paths(text: str) -> list[str]:
    """Every file or folder path `text` names, as written."""
    return [m[1] for m in _DESIGN_PATH.finditer(text)] + [
        f"{m[1]}.py" for m in _ROUTE_STOP.finditer(text)
    ]


def path_exists(path: str) -> bool:
    """Whether `path` names a file or folder of the repository or of `deffcore/` (a `*` in it
    matches something)."""
    for base in (REPO, REPO / "deffcore"):
        if any(base.glob(path.rstrip("/"))) if "*" in path else (base / path).exists():
            return True
    return False


def test_the_design_check_sees_backticked_paths_and_the_route():
    text = "| `inputs/run_spec.py`, `work/sweep/` |\n    runs/measure   the device\n`RunSpec`"
    assert design_paths(text) == ["inputs/run_spec.py", "work/sweep/", "runs/measure.py"]
    assert path_exists("inputs/run_spec.py") and path_exists("work/sweep/")
    assert path_exists("lenses/atlas_*.py") and path_exists("docs/SPEC.md")
    assert not path_exists("inputs/model_names.py") and not path_exists("statistics/paired/")


def test_the_design_map_fits_on_one_page():
    lines = len(DESIGN.read_text(encoding="utf-8").splitlines())
    assert lines <= DESIGN_MAX_LINES, f"docs/DESIGN.md is {lines} lines (at most 150)"


def test_every_path_the_design_map_names_exists():
    text = DESIGN.read_text(encoding="utf-8")
    missing = sorted({p for p in design_paths(text) if not path_exists(p)})
    assert not missing, f"docs/DESIGN.md names paths that do not exist: {missing}"
    dotted = [m[0] for m in _CODE_DOTTED.finditer(text) if not _resolves(m[0])]
    assert not dotted, f"docs/DESIGN.md names modules that do not exist: {dotted}"


def test_the_design_map_has_a_row_for_every_stage():
    from scripts.house_figures import STAGES

    text = DESIGN.read_text(encoding="utf-8")
    missing = [s for s in STAGES if f"| `{s}/` |" not in text]
    assert not missing, f"docs/DESIGN.md's stage table has no row for {missing}"
