"""The public API: `deffcore/__init__.py` names what users import, and it imports."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import deffcore as dc

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", sorted(dc.__all__))
def test_every_public_name_imports(name):
    assert getattr(dc, name) is not None
    assert name in dir(dc)


@pytest.mark.parametrize("name", sorted(dc._LAZY))
def test_a_lazy_name_comes_from_the_module_that_defines_it(name):
    """The table names the defining module (never a module that merely re-exports the name), so
    a moved definition fails here instead of resolving through a stale alias."""
    obj = getattr(dc, name)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        assert obj.__module__ == dc._LAZY[name]


def test_the_names_the_issue_lists_are_public():
    for name in ("measure", "measure_states", "trust", "similarity_matrix", "effective_depth",
                 "bootstrap", "open_snapshot", "gw_matrix", "correlate"):  # fmt: skip
        assert name in dc.__all__
    assert dc.bootstrap is dc.bootstrap_deff_over_L


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        dc.nope  # noqa: B018


def test_importing_deffcore_stays_light():
    """The numpy engine only: torch (a second or more) and transformers (seconds) load on first
    use of what needs them, and a name that needs torch still works when asked for."""
    code = (
        "import sys, deffcore; heavy = ('torch', 'transformers', 'streamlit'); "
        "print(*(m in sys.modules for m in heavy)); "
        "S = deffcore.similarity_matrix(deffcore.orthogonal_states(32, 8, 5).states); "
        "print('torch' in sys.modules, S.shape)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.splitlines() == ["False False False", "True (5, 5)"]


def test_the_lazy_torch_becomes_torch_on_first_use():
    """`deffcore.core.lazy`: the stand-in imports torch when first read and is then replaced by
    torch itself in the modules that hold it (a plain global read after)."""
    code = (
        "import sys, types; import deffcore.measures.similarity as s; "
        "print('torch' in sys.modules, type(s.torch).__name__); "
        "x = s.torch.zeros(2); "
        "print(s.torch is sys.modules['torch'], isinstance(x, s.torch.Tensor))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.splitlines() == ["False LazyModule", "True True"]
