"""AppTest: browsing every page on an empty cache writes at most a few MB (BENCHMARKS.md,
"Bytes written by browsing"; the browser's figures are benchmarks/bench_browse_writes.py).

One app session opens every page app.py registers (the eight listed, the Overview's tabs and
every hidden page) with the cache folder and the user's folders (`HOME`, `XDG_CACHE_HOME`,
`HF_HOME`) pointed at empty temporary folders, and counts the bytes of the files each page
created or changed there. A page that needs to write more must say so and wait for a button.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from apptest_helpers import assert_clean
from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parents[2]
#: Bytes all the pages together may write without a button press.
LIMIT = 10_000_000


def every_page() -> list[str]:
    """Every page file app.py registers, the listed ones first, as `pages/<file>` (its LISTED
    and HIDDEN tables, read without running app.py, which draws the navigation)."""
    tables = {}
    for node in ast.parse((REPO / "app.py").read_text()).body:
        name = getattr(getattr(node, "target", None), "id", None)
        if isinstance(node, ast.AnnAssign) and name in ("LISTED", "HIDDEN"):
            tables[name] = ast.literal_eval(node.value)
    files = [row[1] for row in tables["LISTED"]] + [row[0] for row in tables["HIDDEN"]]
    return [f"pages/{file}" for file in files]


def files(roots: list[Path]) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime_ns) of every file under `roots`."""
    found: dict[str, tuple[int, int]] = {}
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    st = os.lstat(path)
                except OSError:  # removed while walking (a lock, a renamed part)
                    continue
                found[path] = (st.st_size, st.st_mtime_ns)
    return found


def test_every_page_on_an_empty_cache_writes_at_most_a_few_mb(tmp_path, monkeypatch):
    roots = {"DEFF_CACHE_DIR": "cache", "HOME": "home", "XDG_CACHE_HOME": "home/.cache"}
    roots["HF_HOME"] = "home/hf"
    for var, sub in roots.items():
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(var, str(tmp_path / sub))
    watched = [tmp_path]
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    written: dict[str, dict[str, int]] = {}
    before = files(watched)
    at.run()
    assert_clean(at)
    for page in every_page():
        if page != "pages/0_Overview.py":
            at.switch_page(page)
            at.run()
            assert_clean(at)
        after = files(watched)
        written[page] = {p: s for p, (s, m) in after.items() if before.get(p) != (s, m)}
        before = after
    total: dict[str, int] = {}
    for by_page in written.values():
        total.update(by_page)
    report = {
        page: (sum(w.values()), max(w, key=w.get, default=""))
        for page, w in written.items()
        if sum(w.values()) > 100_000
    }
    assert sum(total.values()) <= LIMIT, f"bytes written by page (largest file): {report}"


def test_the_walk_opens_every_page_file():
    assert sorted(every_page()) == sorted(
        f"pages/{p.name}" for p in (REPO / "pages").glob("[0-9]*.py")
    )


def test_choosing_gemma_on_the_runs_page_writes_nothing_and_says_what_run_will(tmp_path):
    # Gemma-3 ships in parts; counting its windows loaded its tokenizer, which joined the
    # 253 MB file into the cache as soon as the model was picked, before any button
    from deffcore.inputs.model import packaged_bytes
    from deffcore.runs.planner import human_bytes

    cache = Path(os.environ["DEFF_CACHE_DIR"])
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300).run()
    at.switch_page("pages/7_Runs.py")
    at.run()
    next(s for s in at.selectbox if s.label == "Model").set_value("gemma3-270m").run()
    assert_clean(at)
    written = sum(s for s, _ in files([cache]).values()) if cache.exists() else 0
    assert written <= LIMIT, f"{written:,} bytes written to the cache by picking a model"
    size = human_bytes(packaged_bytes("gemma3-270m")).replace(".", "\\.")
    captions = [c.value for c in at.caption]
    assert any(f"joins the model\\'s file \\({size}\\)" in c for c in captions), captions
    assert any(f"\\+ model file {size}" in c for c in captions), captions


def test_the_interventions_button_says_what_it_will_write_first():
    # its default runs a packaged model still in parts: the file joined first and the new
    # cache entries are named beside the button, before anything is pressed
    cache = Path(os.environ["DEFF_CACHE_DIR"])
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300).run()
    at.switch_page("pages/8_Interventions.py")
    at.run()
    assert_clean(at)
    said = [c.value for c in at.caption if "into the cache folder" in c.value]
    assert any("runs\\:" in c and "writes about" in c for c in said), [c.value for c in at.caption]
    assert any(b.label.startswith("Run interventions") for b in at.button)
    assert not cache.exists() or sum(s for s, _ in files([cache]).values()) <= LIMIT
