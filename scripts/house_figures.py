"""The shape of the code, in figures: `python scripts/house_figures.py`.

Every `import` statement counts, function-level ones and those under `if TYPE_CHECKING:` too (a
local import only postpones a cycle). An edge `a -> b` means module `a` imports module `b`; a
package's `__init__` is left out of the graph (it only names the package). Figures:

    modules, edges     of deffcore/ and explorer/
    levels             the longest chain of imports + 1 (a module importing nothing is level 1)
    cycles             strongly connected groups of modules (0 is the goal)
    up-stage imports   a deffcore module importing one of a later stage (`STAGES`; 0 is the goal)
    measure path       the deffcore modules whose functions run in one tiny `dc.measure(...)`
                       call and its summary (`measure_path`; the package face
                       `deffcore/__init__.py` is not counted): how many files a reader opens to
                       follow a measurement to its D_eff (tests/test_layering.py pins it)
    largest modules    the longest files and functions, as information: a module may be long
                       when it holds one idea (no size is a goal; tests/test_layering.py pins
                       only the stages and the cycles)
    BOS answer spans   the modules the BOS answer's computation and wording live in
                       (`BOS_ANSWER_MODULES`; at most 3, tests/test_bos_answer.py)
"""

from __future__ import annotations

import ast
import inspect
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: deffcore's stage packages in pipeline order: a module may import its own stage and earlier ones.
STAGES: tuple[str, ...] = (
    "core",
    "inputs",
    "extraction",
    "measures",
    "statistics",
    "figures",
    "views",
    "runs",
    "lenses",
    "labs",
    "work",
    "cli",
)

#: The modules the BOS answer (is the gap to F_L a position-0 artefact? SPEC 11.6, 15) spans:
#: its computation and wording, top to bottom; the generic paired bootstrap; its check on
#: constructions with a known answer. Surfaces (pages, `explorer/answer_box.py`, the CLI, the
#: report, the notebook) call `run_answer` and hold no answer logic.
BOS_ANSWER_MODULES: tuple[str, ...] = (
    "deffcore.statistics.bos_answer",
    "deffcore.statistics.paired",
    "deffcore.lenses.bos_calibration",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def source_files(tops: Iterable[str] = ("deffcore", "explorer")) -> dict[str, Path]:
    """{module name: path} of every Python file under the given top folders."""
    return {module_name(p): p for top in tops for p in sorted((ROOT / top).rglob("*.py"))}


def imported_names(tree: ast.AST, module: str, is_package: bool) -> list[str]:
    """Every dotted name an import statement anywhere in `tree` names (absolute)."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            names.append(base)
            names += [f"{base}.{alias.name}" for alias in node.names]  # `from p import module`
    return names


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """{module: modules it imports}, package `__init__`s left out."""
    packages = {name for name, path in files.items() if path.name == "__init__.py"}
    graph = {}
    for name, path in files.items():
        if name in packages:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        found = imported_names(tree, name, False)
        graph[name] = {n for n in found if n in files and n != name and n not in packages}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return found


def levels(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each module's level: 1 + the longest chain of imports below it (a cycle counts once)."""
    level: dict[str, int] = {}

    def of(v: str, seen: frozenset[str]) -> int:
        if v in level:
            return level[v]
        below = [of(w, seen | {v}) for w in graph.get(v, ()) if w not in seen]
        level[v] = 1 + max(below, default=0)
        return level[v]

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        of(v, frozenset())
    return level


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "deffcore" and len(parts) > 2 and parts[1] in STAGES else None


def up_stage_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(a, b): module a imports b of a later stage than its own."""
    out = []
    for a, targets in graph.items():
        for b in targets:
            sa, sb = stage_of(a), stage_of(b)
            if sa and sb and STAGES.index(sb) > STAGES.index(sa):
                out.append((a, b))
    return sorted(out)


def largest_modules(files: dict[str, Path], top: int = 5) -> list[tuple[str, int]]:
    """The `top` longest files, (path, lines), longest first."""
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in files.values()}
    return sorted(sizes.items(), key=lambda x: -x[1])[:top]


def longest_functions(files: dict[str, Path], top: int = 5) -> list[tuple[str, int]]:
    """The `top` longest functions, (path:name, lines), longest first."""
    out = []
    for path in files.values():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                out.append((f"{path.relative_to(ROOT)}:{node.name}", lines))
    return sorted(out, key=lambda x: -x[1])[:top]


def measure_path() -> list[str]:
    """The deffcore modules (paths under deffcore/) whose functions run while the random-weight
    tiny-llama (offline, seconds) is measured on 16 passages of 32 tokens and summarised; the
    package face `deffcore/__init__.py` is left out. Every thread is watched (a profile hook
    on each), the cache is a fresh temporary folder."""
    import os
    import tempfile
    import threading

    seen: set[str] = set()
    package = str(ROOT / "deffcore") + os.sep

    def watch(frame, event, arg):  # the profile hook's signature
        # what runs at import (a module's or a class's body, the stand-in that imports torch
        # on first use: deffcore/core/lazy.py) is not the run's work
        code = frame.f_code
        if event == "call" and code.co_flags & inspect.CO_NEWLOCALS and code.co_name != "<module>":
            path = frame.f_code.co_filename
            if path.startswith(package):
                seen.add(path[len(package) :].replace(os.sep, "/"))

    old = os.environ.get("DEFF_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="deff-measure-path-") as folder:
        os.environ["DEFF_CACHE_DIR"] = folder
        if str(ROOT) not in sys.path:  # run as a script: this checkout's deffcore
            sys.path.insert(0, str(ROOT))
        import deffcore as dc

        threading.setprofile(watch)
        sys.setprofile(watch)
        try:
            dc.measure("tiny-llama", dataset="bbc-news", n=16, max_tokens=32).summary()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
            if old is None:
                os.environ.pop("DEFF_CACHE_DIR", None)
            else:
                os.environ["DEFF_CACHE_DIR"] = old
    return sorted(seen - {"__init__.py", "core/lazy.py"})


def main() -> int:
    files = source_files()
    graph = import_graph(files)
    app = {**files, **{f"pages.{p.stem}": p for p in sorted((ROOT / "pages").glob("*.py"))}}
    print(f"modules            {len(graph)} (deffcore/ and explorer/, package faces left out)")
    print(f"import edges       {sum(len(t) for t in graph.values())}")
    print(f"levels             {max(levels(graph).values())}")
    print(f"cycles             {len(cycles(graph))} {cycles(graph) or ''}")
    print(f"up-stage imports   {len(up_stage_imports(graph))} {up_stage_imports(graph) or ''}")
    path = measure_path()
    print(f"measure path       {len(path)} modules dc.measure runs through (deffcore/__init__.py")
    print(f"                   not counted): {path}")
    print(f"largest modules    {largest_modules(app)}")
    print(f"longest functions  {longest_functions({**app, 'app': ROOT / 'app.py'})}")
    print(f"BOS answer spans   {len(BOS_ANSWER_MODULES)} modules {list(BOS_ANSWER_MODULES)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
