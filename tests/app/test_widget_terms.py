"""Every option a widget offers has a glossary entry (`deffcore.views.glossary.term_for`): the test
opens every page, enumerates its radios, select boxes, multiselects and select sliders, and
looks each option up. Widgets that choose *data* (a model, a run, a number, a preset, a
passage) are listed apart with why; every other widget offers words a person may not know."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from deffcore.views.glossary import term_for

REPO = Path(__file__).resolve().parents[2]
#: widget key -> why its options are not glossary terms
DATA_WIDGETS = {
    "model_packaged": "model names, each described in its option",
    "model_random_base": "model names",
    "sweep_models": "model names",
    "iv_model": "model names",
    "models_families": "family names of models",
    "runs_open": "runs",
    "runs_compare": "runs",
    "runs_side_a": "runs",
    "runs_side_b": "runs",
    "runs_delete": "runs",
    "runs_resume": "runs",
    "inspect_passage": "passages",
    "syn_preset": "presets that describe themselves",
    "rc_preset": "presets, explained in the widget's help",
    "pt_preset": "presets, explained in the widget's help",
    "rc_gammas": "numbers (γ)",
    "syn_t_n": "numbers",
    "syn_t_d": "numbers",
    "syn_n": "numbers",
    "syn_d": "numbers",
    "bootstrap_B": "numbers",
}


def test_every_option_a_widget_offers_has_a_glossary_entry():
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    missing, seen = [], set()
    for page in sorted((REPO / "pages").glob("[0-9]*.py")):
        at.switch_page(str(page.relative_to(REPO))).run()
        assert not at.exception, page.name
        for kind in ("radio", "selectbox", "multiselect", "select_slider"):
            for widget in getattr(at, kind):
                seen.add(widget.key)
                if widget.key in DATA_WIDGETS:
                    continue
                missing += [
                    (page.name, widget.label, option)
                    for option in widget.options
                    if term_for(option, widget.label) is None
                ]
    assert not missing, missing
    assert {"pooling", "metric", "passages", "bos", "syn_step", "iv_which"} <= seen
