"""The house's shape: stages in pipeline order, no cycles, no import up a stage; deffcore
never imports Streamlit, the explorer or a page; nothing imports a page. No size is pinned: a
module may be long when it holds one idea.

Every `import` counts, function-level ones and `if TYPE_CHECKING:` ones too (a local import only
postpones a cycle). The checker is `scripts/house_figures.py`'s.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from scripts.house_figures import (
    STAGES,
    cycles,
    import_graph,
    imported_names,
    levels,
    source_files,
    stage_of,
    up_stage_imports,
)

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "deffcore"
MODULES = source_files(("deffcore",))
APP_FILES: dict[str, Path] = {
    **source_files(("explorer",)),
    **{f"pages.{p.stem}": p for p in sorted((ROOT / "pages").glob("*.py"))},
    "app": ROOT / "app.py",
}


def _imports_of(path: Path, name: str) -> list[str]:
    return imported_names(ast.parse(path.read_text(), filename=str(path)), name, False)


# ---------------------------------------------------------------------------------------------
# The checker itself


def test_the_checker_sees_local_relative_and_type_checking_imports():
    code = (
        "from typing import TYPE_CHECKING\n"
        "def f():\n    from deffcore.inputs.model import load_model\n"
        "from . import cache\n"
        "if TYPE_CHECKING:\n    import deffcore.views.run_view\n"
    )
    names = imported_names(ast.parse(code), "deffcore.labs.x", is_package=False)
    assert "deffcore.inputs.model" in names and "deffcore.labs.cache" in names
    assert "deffcore.views.run_view" in names


def test_the_checker_finds_cycles_levels_and_imports_up_a_stage():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert levels({"a": {"b"}, "b": {"c"}, "c": set(), "d": set()}) == {
        "a": 3,
        "b": 2,
        "c": 1,
        "d": 1,
    }
    graph = {"deffcore.inputs.x": {"deffcore.runs.y"}, "deffcore.runs.y": {"deffcore.core.z"}}
    assert up_stage_imports(graph) == [("deffcore.inputs.x", "deffcore.runs.y")]


def test_known_edges_are_found():
    graph = import_graph(MODULES)
    assert "deffcore.core.files" in graph["deffcore.inputs.model"]  # gemma3_gguf's local import
    assert "deffcore.extraction.atlas" in graph["deffcore.runs.measure"]  # measure_spec's


# ---------------------------------------------------------------------------------------------
# deffcore: stages in pipeline order


def test_every_module_lives_in_a_stage_package():
    loose = [
        name
        for name in MODULES
        if name not in ("deffcore", "deffcore.__main__") and stage_of(name) is None
        and name.removeprefix("deffcore.") not in STAGES
    ]  # fmt: skip
    assert not loose, f"modules outside the stage packages {STAGES}: {loose}"
    assert sorted(p.name for p in PKG.iterdir() if p.is_dir() and p.name != "__pycache__") == (
        sorted([*STAGES, "data"])
    )


def test_no_import_cycles_in_deffcore_and_the_explorer():
    found = cycles(import_graph({**MODULES, **source_files(("explorer",))}))
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_module_imports_a_later_stage():
    up = up_stage_imports(import_graph(MODULES))
    assert not up, f"imports up a stage ({' -> '.join(STAGES)}): {up}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_deffcore_never_imports_streamlit_the_explorer_or_a_page(name):
    tops = {n.split(".")[0] for n in _imports_of(MODULES[name], name)}
    assert not tops & {"streamlit", "explorer", "pages", "app"}, f"{name} imports {tops}"


def test_paths_and_errors_are_leaves():
    graph = import_graph(MODULES)
    assert graph["deffcore.core.files"] <= {"deffcore.core.errors"}
    assert graph["deffcore.core.errors"] == set()


def test_one_model_family():
    """`model_family` is defined once (deffcore.views.models_overview); the rest import it."""
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
# The app's layers: pages -> explorer -> deffcore; nothing imports a page


def test_the_explorer_is_an_importable_package():
    assert (ROOT / "explorer" / "__init__.py").is_file()
    assert "explorer.page" in APP_FILES and "explorer.settings" in APP_FILES


@pytest.mark.parametrize("name", sorted(APP_FILES))
def test_no_module_imports_a_page(name):
    """Pages are scripts the router runs (st.navigation), never modules to import: a page
    importing another would run its widgets twice. explorer/ and app.py import no page."""
    bad = [n for n in _imports_of(APP_FILES[name], name) if n.split(".")[0] in ("pages", "app")]
    assert not bad, f"{name} imports {bad}"


def test_the_layering_checks_catch_a_page_import():
    tree = "import pages.x\nfrom app import navigation\nfrom explorer.cards import show_figure\n"
    names = imported_names(ast.parse(tree), "explorer.views", False)
    assert {"pages.x", "app", "explorer.cards"} <= set(names)


def test_the_forward_pass_and_the_store_never_ask_the_inputs_stage_again():
    """A run's data goes one way (docs/DESIGN.md, "A run's data through the stages"): the
    forward pass, its batches and stage, and the cache take what `inputs/` made (its types) and
    call nothing of it: the run's token ids, architecture and sources are made before."""
    takes_only = {
        "deffcore/extraction/forward.py": {
            "Architecture",
            "LoadedModel",
            "RunInputs",
            "host_memory_bytes",  # the machine's memory, before the rows are allocated
        },
        # DatasetSpec: a type only (annotations), the RunSpec's parsed dataset
        "deffcore/extraction/cache.py": {"RunSpec", "DatasetSpec", "host_memory_bytes"},
    }
    for path, allowed in takes_only.items():
        tree = ast.parse((ROOT / path).read_text(), filename=path)
        named = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "deffcore.inputs"
            ):
                named |= {alias.name for alias in node.names}
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("deffcore.inputs") for a in node.names), path
        assert named <= allowed, f"{path} calls into inputs/: {sorted(named - allowed)}"


# ---------------------------------------------------------------------------------------------
# One measurement, few files: each concept whole in the module named after it

#: The most deffcore modules one `dc.measure(...)` may run through (deffcore/__init__.py, the
#: package face, not counted). 14 today: core/{checks,files}, inputs/{model,architecture,texts,
#: run_spec}, extraction/{forward,cache,atlas_tap,atlas_store}, measures/{similarity,depth},
#: runs/{measure,measurement}; the atlas pair becoming one module makes it 13; the goal is 12.
MEASURE_PATH_BUDGET = 12


def test_one_measurement_runs_through_few_modules():
    from scripts.house_figures import measure_path

    path = measure_path()
    assert "runs/measure.py" in path and "measures/depth.py" in path  # the trace sees the run
    assert len(path) <= MEASURE_PATH_BUDGET, (
        f"dc.measure runs through {len(path)} modules (at most {MEASURE_PATH_BUDGET}): {path}; "
        "keep each concept whole in the module named after it"
    )
