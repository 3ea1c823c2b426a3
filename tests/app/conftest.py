"""Fixtures every AppTest module of tests/app shares.

deff_cache_dir  (autouse) overrides tests/conftest.py's fresh cache per test: a module's
                tests share one app session, so they share its cache (the module-scoped
                `cache_dir`: still a temporary folder, never the repo's cache/)
measurement     (module) the module's `RUN` measured once into that cache
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def deff_cache_dir(cache_dir, monkeypatch):
    monkeypatch.setenv("DEFF_CACHE_DIR", str(cache_dir))
    return cache_dir


@pytest.fixture(scope="module")
def measurement(request, cache_dir):
    from deffcore.runs.measure import measure

    return measure(**request.module.RUN)
