"""Effective Depth Explorer: `streamlit run app.py`.

This file is the router (`st.navigation`): it lists the pages, in their numeric order, in
sections, and runs the one the visitor chose. Each page is its own file in pages/ and starts
with `explorer.page.page()` or `explorer.page.require_view()`, which draws the shared sidebar (run
settings and Run at the top, view controls below; values persist across pages), shows a
background run's progress in the main area, and returns the current run: the last run landed
in this session, else the shipped snapshot of the default run. The first page is
pages/0_Overview.py, listed as "Overview".

A page file this list does not name (a new page) is still listed, under "Labs", by its
number: adding a page stays one new file.
"""

from __future__ import annotations

import re
from pathlib import Path

import streamlit as st

HERE = Path(__file__).resolve().parent

#: (section, file in pages/, title), in the order the sidebar lists them (Models sits with the
#: results, where a visitor looks for it, not behind "View more").
PAGES: list[tuple[str, str, str]] = [
    ("Results", "0_Overview.py", "Overview"),
    ("Results", "1_Similarity.py", "Similarity"),
    ("Results", "2_Lag_decay.py", "Lag decay"),
    ("Results", "3_Gap_to_F_L.py", "Gap to F_L"),
    ("Results", "16_Depth_use.py", "Depth use"),
    ("Results", "13_Models.py", "Models"),
    ("Results", "4_BOS_and_controls.py", "BOS & controls"),
    ("Teach", "5_Synthetic_lab.py", "Synthetic lab"),
    ("Checks and runs", "6_Baselines.py", "Baselines"),
    ("Checks and runs", "7_Runs.py", "Runs"),
    ("Labs", "8_Interventions.py", "Interventions"),
    ("Labs", "9_Pruning_boundary.py", "Pruning boundary"),
    ("Labs", "10_Residual_carry.py", "Residual carry"),
    ("Labs", "11_Training_dynamics.py", "Training dynamics"),
    ("Labs", "12_Aggregations.py", "Aggregations"),
    ("Labs", "14_Correlation_lab.py", "Correlation lab"),
    ("Labs", "15_Short_pretraining.py", "Short pretraining"),
]


def _number(name: str) -> float:
    m = re.match(r"(\d+)", name)
    return float(m.group(1)) if m else float("inf")


def _title(name: str) -> str:
    """`13_Model_zoo.py` -> `Model zoo` (a page file this list does not name yet)."""
    return re.sub(r"^\d+_?", "", Path(name).stem).replace("_", " ") or Path(name).stem


def navigation() -> dict[str, list[st.Page]]:
    """Sections -> pages for `st.navigation`, every existing file of pages/ included."""
    named = {file for _, file, _ in PAGES}
    rows = [row for row in PAGES if (HERE / "pages" / row[1]).is_file()]
    rows += [
        ("Labs", path.name, _title(path.name))
        for path in (HERE / "pages").glob("*.py")
        if path.name not in named and not path.name.startswith("_")
    ]
    order = {s: i for i, s in enumerate(dict.fromkeys(section for section, _, _ in PAGES))}
    listed = {file: i for i, (_, file, _) in enumerate(PAGES)}  # PAGES' own order first
    rows.sort(key=lambda r: (order.get(r[0], len(order)), listed.get(r[1], 99), _number(r[1])))
    sections: dict[str, list[st.Page]] = {}
    for section, file, title in rows:
        sections.setdefault(section, []).append(
            st.Page(f"pages/{file}", title=title, default=file == "0_Overview.py")
        )
    return sections


st.navigation(navigation(), expanded=False).run()
