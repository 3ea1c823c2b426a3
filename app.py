"""Effective Depth Explorer: `streamlit run app.py`.

This file is the router (`st.navigation`): it lists eight pages in one row at the top, grouped
by who comes for what (people browsing models, teachers, researchers checking BOS sensitivity,
then About), and runs the one the visitor chose. Each page is its own file in pages/ and
starts with `explorer.page.page()` or `explorer.page.require_view()`, which draws the shared
sidebar (the view controls; values persist across pages), shows a background run's progress
in the main area, and returns the current run: the last run landed in this session, else the
shipped snapshot of the default run. The run panel (run settings and Run) is on the Runs page
only. The first page is pages/0_Overview.py, listed as "Overview".

Every other page file is registered hidden (`visibility="hidden"`): its URL (the file name
without its number, e.g. /Similarity, /Interventions) still opens it, and a listed page links
to it (the Overview's row of Similarity, Lag decay and Gap to F_L; Runs' Baselines; the Labs
page's lab picker). A page file this list does not name (a new page) is registered hidden the
same way: adding a page stays one new file.
"""

from __future__ import annotations

import re
from pathlib import Path

import streamlit as st

HERE = Path(__file__).resolve().parent

#: (who it is for, file in pages/, title), in the order the navigation lists them: at most
#: eight, each group's pages side by side.
LISTED: list[tuple[str, str, str]] = [
    ("Browse models", "0_Overview.py", "Overview"),
    ("Browse models", "13_Models.py", "Models"),
    ("Browse models", "16_Depth_use.py", "Depth use"),
    ("Teach", "5_Synthetic_lab.py", "Teach"),
    ("Check BOS sensitivity", "4_BOS_and_controls.py", "BOS check"),
    ("Check BOS sensitivity", "7_Runs.py", "Runs"),
    ("Check BOS sensitivity", "17_Labs.py", "Labs"),
    ("About", "18_About.py", "About and methods"),
]
#: (file in pages/, title): registered hidden, reached by their URL and by a listed page's link.
HIDDEN: list[tuple[str, str]] = [
    ("1_Similarity.py", "Similarity"),
    ("2_Lag_decay.py", "Lag decay"),
    ("3_Gap_to_F_L.py", "Gap to F_L"),
    ("6_Baselines.py", "Baselines"),
    ("8_Interventions.py", "Interventions"),
    ("9_Pruning_boundary.py", "Pruning boundary"),
    ("10_Residual_carry.py", "Residual carry"),
    ("11_Training_dynamics.py", "Training dynamics"),
    ("12_Aggregations.py", "Aggregations"),
    ("14_Correlation_lab.py", "Correlation lab"),
    ("15_Short_pretraining.py", "Short pretraining"),
]
#: Every page: (section, file, title), the hidden ones under "" (kept for the page notes).
PAGES: list[tuple[str, str, str]] = LISTED + [("", file, title) for file, title in HIDDEN]


def _title(name: str) -> str:
    """`19_Model_zoo.py` -> `Model zoo` (a page file this list does not name yet)."""
    return re.sub(r"^\d+_?", "", Path(name).stem).replace("_", " ") or Path(name).stem


def navigation() -> list[st.Page]:
    """The pages for `st.navigation`: the listed ones in their order (one row of links at the
    top, grouped by who comes for what: LISTED's sections, side by side), then every other
    existing file of pages/ registered hidden (its URL keeps working)."""
    pages = [
        st.Page(f"pages/{file}", title=title, default=file == "0_Overview.py")
        for _, file, title in LISTED
        if (HERE / "pages" / file).is_file()
    ]
    named = {file for _, file, _ in LISTED} | {file for file, _ in HIDDEN}
    hidden = [row for row in HIDDEN if (HERE / "pages" / row[0]).is_file()]
    hidden += sorted(
        (path.name, _title(path.name))
        for path in (HERE / "pages").glob("*.py")
        if path.name not in named and not path.name.startswith("_")
    )
    return pages + [
        st.Page(f"pages/{file}", title=title, visibility="hidden") for file, title in hidden
    ]


# the links in one row at the top (every entry in sight, no menu to open): the sidebar keeps
# the view controls alone, so it fits the window (tests/e2e/test_navigation_browser.py)
st.navigation(navigation(), position="top").run()
