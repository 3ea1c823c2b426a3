"""Every example in the README and on the docs site runs, so no example rots.

Per page (README.md, docs/**/*.md and the files they include), its fenced ```python and
```bash blocks run in the order the page shows them, in one fresh working folder: the Python
blocks of a page in one namespace (in this process, as a notebook would), the shell blocks with
`bash -euo pipefail`, the venv's bin first on PATH (so `python` is the venv's) and this clone
importable. Every page shares one temporary DEFF_CACHE_DIR, so a tiny run measured on one page
is a cache hit on the next. An example that cannot run in a test carries its reason in the
fence (`title="not run: <reason>"`, shown on the site as the block's title); they are listed
in NOT_RUN below, so adding one is a visible change. The examples use the built-in tiny models
(`tiny-llama`) and synthetic states, so a page takes seconds.

Also: every fence names a known language (an unlabelled block would escape the run), every
Python block compiles, the README's test command is the one `.ci/run` runs, and every
repository file a page names exists.
"""

from __future__ import annotations

import linecache
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_pages import KNOWN_LANGUAGES, REPO, all_blocks, blocks, own_pages, pages

#: Every example that does not run in the tests, by page, with its reason (the fence's title).
NOT_RUN: dict[str, list[str]] = {
    "README.md": ["the setup commands themselves (CI runs the second: .ci/run)"],
    "docs/install.md": ["installs packages into your environment"],
    "docs/sharing.md": ["starts the explorer (a server that runs until stopped)"],
    "docs/serving.md": ["starts the explorer for everyone on the network"],
    "docs/sweeps.md": ["needs a Ray cluster of several machines"],
    "docs/results.md": ["an hour on 2 cores, and it rewrites the shipped default run"],
    "docs/development.md": ["the test suite itself (this test is part of it)"],
}
#: Shell blocks may take this long (a tiny model's CLI run takes seconds).
SHELL_TIMEOUT_S = 300
_VENV_BIN = str(Path(sys.executable).parent)


def _runnable_pages() -> list[str]:
    return [p for p in pages() if any(b.language in ("python", "bash") for b in blocks(p))]


@pytest.fixture(scope="module")
def docs_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("docs_cache")


def _run_shell(code: str, where: str, cwd: Path, cache: Path) -> None:
    env = {
        **os.environ,
        "PATH": f"{_VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
        "DEFF_CACHE_DIR": str(cache),
        "COLUMNS": "100",
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=SHELL_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, (
        f"{where}: exit {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n"
        f"--- stderr\n{done.stderr[-3000:]}"
    )


@pytest.mark.parametrize("page", _runnable_pages())
def test_every_example_of_the_page_runs(page, docs_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("DEFF_CACHE_DIR", str(docs_cache))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    ran = 0
    for block in blocks(page):
        if block.language not in ("python", "bash") or block.not_run:
            continue
        if block.language == "python":
            # its source readable by name, as a notebook cell's is (nnsight's trace reads it)
            lines = block.code.splitlines(keepends=True)
            linecache.cache[block.where] = (len(block.code), None, lines, block.where)
            exec(compile(block.code, block.where, "exec"), namespace)
        else:
            _run_shell(block.code, block.where, tmp_path, docs_cache)
        ran += 1
    assert ran or page in NOT_RUN, f"{page}: no example ran"


def test_the_examples_that_do_not_run_are_few_and_say_why():
    found: dict[str, list[str]] = {}
    for block in all_blocks():
        if block.not_run is not None:
            assert block.language in ("python", "bash"), f"{block.where}: not-run on a data block"
            assert len(block.not_run) >= 10, f"{block.where}: say why it does not run"
            found.setdefault(block.page, []).append(block.not_run)
    assert found == NOT_RUN


def test_every_fence_names_a_known_language():
    for block in all_blocks():
        assert block.language in KNOWN_LANGUAGES, (
            f"{block.where}: fence language {block.language!r}; use one of "
            f"{sorted(KNOWN_LANGUAGES)} (python and bash blocks are run by this test)"
        )


def test_every_python_example_compiles():
    for block in all_blocks():
        if block.language == "python":
            compile(block.code, block.where, "exec")


def test_the_readme_test_command_is_the_one_ci_runs():
    """The README's second command is what `.ci/run` runs (after CI=true)."""
    first = next(b for b in blocks("README.md") if b.language == "bash")
    commands = [line.split("#", 1)[0].strip() for line in first.code.splitlines()]
    assert commands[:2] == [
        "bash scripts/setup.sh && .venv/bin/streamlit run app.py",
        "bash scripts/setup.sh --test && .venv/bin/python -m pytest",
    ]
    ci = (REPO / ".ci" / "run").read_text()
    assert "bash scripts/setup.sh --test && CI=true .venv/bin/python -m pytest" in ci


def test_the_readme_is_a_front_door():
    """At most 200 lines: the two commands first, the first screen's picture (small), the
    formula, and links into the docs (the reference lives there)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert text.index("bash scripts/setup.sh &&") < text.index("![")
    (picture,) = re.findall(r"!\[[^\]]+\]\((?P<path>[^)]+\.png)\)", text)
    assert (REPO / picture).stat().st_size < 300_000
    assert "D_eff(K) = L / (1 + 2 * sum_{k=1..K} (1 - k/L) * rho(k))" in text
    assert len(re.findall(r"\]\(docs/[\w/-]+\.md\)", text)) >= 10


#: A repository path in backticks (`benchmarks/bench_gw.py`), and a README link's target.
_CODE_PATH = re.compile(r"`(?P<path>[\w.-]+/[\w./<>*-]*)`")
_LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")
#: Top-level folders whose files a page may name (cache/ and .venv/ are made at run time).
_NAMED_TOP = {p.name for p in REPO.iterdir()} - {"cache", ".venv", ".git"}


def test_every_repository_file_a_page_names_exists():
    for page in ["README.md", *own_pages()]:
        text = (REPO / page).read_text(encoding="utf-8")
        for match in _CODE_PATH.finditer(text):
            path = match["path"].rstrip("/")
            if path.split("/", 1)[0] in _NAMED_TOP and not re.search(r"[<>*]", path):
                assert (REPO / path).exists(), f"{page} names {path}, which does not exist"
    for match in _LINK.finditer((REPO / "README.md").read_text(encoding="utf-8")):
        target = match["target"]
        if "://" not in target:
            assert (REPO / target).exists(), f"README.md links to {target}, which does not exist"
