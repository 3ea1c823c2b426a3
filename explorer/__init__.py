"""The Effective Depth Explorer's Streamlit helpers (the only Streamlit code beside the pages).

One job per module; pages import what they use from the module that owns it:

- `explorer.page`      start a page: config, sidebar, run panel -> (run, settings)
- `explorer.settings`  the shared sidebar: run settings, view settings, kept across pages
- `explorer.uploads`   uploaded passage files: checked, stored by content hash, pruned
- `explorer.run_panel` background runs: start, follow, settle, resume; in-page progress bars
- `explorer.views`     the session's current run and views of cached runs
- `explorer.cards`     headline cards, the trust line, `show_figure` with its downloads
- `explorer.guard`     `guarded`: one clear error on the page instead of a traceback

The analysis the pages show lives in `deffcore` (no Streamlit there): figures in
`deffcore.figures`, tables in `deffcore.runs.tables`, `deffcore.views.paper`,
`deffcore.views.models_overview`.
"""
