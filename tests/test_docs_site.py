"""The docs site builds with `mkdocs build --strict` (once per session, into a temporary folder),
offline, with the two generated reference pages complete: every public name of
`deffcore.__all__` in the API reference and every subcommand's `--help` in the CLI reference.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_pages import REPO

import deffcore

HOOKS = REPO / "scripts" / "docs_hooks.py"


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", HOOKS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-6000:]}"
    return out


def test_the_site_builds_strictly_with_every_page_of_the_nav(site):
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda *_: None)
    nav = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=_Loader)["nav"]

    def leaves(items):
        for item in items:
            for value in item.values() if isinstance(item, dict) else [item]:
                yield from leaves(value) if isinstance(value, list) else [value]

    for page in leaves(nav):
        assert (site / page.replace(".md", ".html")).is_file(), f"{page} was not built"


def test_the_site_needs_nothing_from_elsewhere(site):
    """No font, script, style or image from another host (`theme.font: false`)."""
    remote = re.compile(r"""<(?:link|script|img)\b[^>]*(?:href|src)=["']?(?:https?:)?//""")
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        assert not remote.search(html), f"{page.relative_to(site)} loads from another host"
        assert "fonts.googleapis" not in html and "fonts.gstatic" not in html


def test_the_api_reference_documents_every_public_name(site):
    html = (site / "reference" / "api.html").read_text(encoding="utf-8")
    headings = set(re.findall(r'<h3 id="[^"]*"[^>]*>.*?dc\.(\w+)', html, flags=re.DOTALL))
    assert headings == set(deffcore.__all__)


def test_every_public_name_is_documented_where_it_is_defined():
    """The generated page names each object by its defining module (no hard-coded paths)."""
    paths = _hooks().public_api()
    assert list(paths) == list(deffcore.__all__)
    assert paths["measure"] == f"{deffcore.measure.__module__}.measure"  # a lazily imported name
    assert paths["POOLINGS"].endswith(".POOLINGS")
    assert paths["synthetic"] == "deffcore.measures.synthetic"
    for name, path in paths.items():
        module, _, attr = path.rpartition(".")
        owner = importlib.import_module(module) if module else None
        assert path == "deffcore.measures.synthetic" or getattr(owner, attr) is getattr(
            deffcore, name
        )


def test_the_cli_reference_shows_every_subcommand_help(site):
    html = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    hooks = _hooks()
    commands = hooks.subcommands(hooks.build_parser())
    assert len(commands) >= 10
    for name in commands:
        assert f'id="{name}"' in html, f"no section for `deffcore {name}`"
        assert f"usage: deffcore {name} [-h]" in html, f"no --help text for `deffcore {name}`"
    assert "--max-tokens MAX_TOKENS" in html and "python -m deffcore [-h]" not in html
