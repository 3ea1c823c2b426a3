"""`deffcore app`: what it hands to Streamlit (the shipped config, localhost unless told), what
it refuses before any server starts (a bad --run FILE, a bad port, no Streamlit), and where it
finds the explorer's files (a checkout's root, an install's explorer/_app).

`os.execve` is replaced by a recorder, so no server starts here; the slow wheel test starts a
real one from an installed wheel.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from deffcore.cli import app, main
from deffcore.views.sharing import APP_RUN_ENV

REPO = Path(__file__).resolve().parent.parent


class Started(Exception):
    """Raised by the recorder in place of becoming the server."""


@pytest.fixture
def started(monkeypatch):
    """The (program, argv, env) `deffcore app` would have become."""
    calls: list[tuple[str, list[str], dict[str, str]]] = []

    def execve(program, argv, env):
        calls.append((program, list(argv), dict(env)))
        raise Started

    monkeypatch.setattr(os, "execve", execve)
    return calls


def start(argv: list[str]) -> int:
    try:
        return main.main(["app", *argv])
    except Started:
        return 0


@pytest.fixture(scope="module")
def snapshot_body(tmp_path_factory):
    from deffcore.runs.measure import measure
    from deffcore.views.run import Run

    old = os.environ.get("DEFF_CACHE_DIR")
    os.environ["DEFF_CACHE_DIR"] = str(tmp_path_factory.mktemp("app_cache"))
    try:
        m = measure(model="tiny-llama", n=8, max_tokens=16)
        return json.dumps(
            Run.from_measurement(m).to_snapshot(command="deffcore measure --model tiny-llama")
        ).encode()
    finally:
        os.environ.pop("DEFF_CACHE_DIR") if old is None else os.environ.update(DEFF_CACHE_DIR=old)


def test_the_server_runs_no_full_gc_after_each_script_run():
    """Streamlit's default `gc.collect(2)` after every script run (a polling fragment reruns
    each second) starved the jobs worker thread of the GIL: the shipped default's diagnostics
    took ~28 minutes on request (benchmarks/bench_app_gc.py). Off in the config,
    and so in every way the app is started (`deffcore app` passes the config as flags)."""
    path = REPO / ".streamlit" / "config.toml"
    assert tomllib.loads(path.read_text())["runner"]["postScriptGC"] is False
    assert "--runner.postScriptGC=false" in app.config_flags(path)


def test_it_hands_streamlit_every_shipped_setting_and_listens_on_localhost(started):
    assert start([]) == 0
    ((program, argv, env),) = started
    assert program == sys.executable and argv[:4] == [sys.executable, "-m", "streamlit", "run"]
    assert argv[-1] == str(REPO / "app.py")  # a checkout runs its own root files
    flags = argv[4:-1]  # options before the script: what follows it would be the script's
    assert all(f.startswith("--") for f in flags)
    config = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())
    for section, values in config.items():
        for key, value in values.items():
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            assert f"--{section}.{key}={shown}" in flags
    assert "--theme.font=sans serif" in flags and "--server.fileWatcherType=none" in flags
    assert flags[-1] == "--server.address=localhost"  # after the config: it wins
    assert not [f for f in flags if f.startswith("--server.port")]  # Streamlit's default
    assert APP_RUN_ENV not in env  # no --run: a new session shows the default run


def test_address_and_port_are_opt_in_and_a_public_address_is_said(started, capsys):
    assert start(["--address", "0.0.0.0", "--port", "8765"]) == 0
    flags = started[0][1][4:-1]
    assert flags[-2:] == ["--server.address=0.0.0.0", "--server.port=8765"]
    assert "anyone who can reach it" in capsys.readouterr().out
    started.clear()
    assert start(["--address", "127.0.0.1"]) == 0
    assert "anyone" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--port", "0"], "--port must be between 1 and 65535"),
        (["--port", "70000"], "--port must be between 1 and 65535"),
        (["--address", "local host"], "--address must be a host name"),
        (["--port", "eighty"], "invalid int value"),
    ],
)
def test_bad_listening_arguments_get_one_sentence(started, capsys, argv, said):
    try:
        code = start(argv)
    except SystemExit as exit:  # argparse's own refusal (one line: OneLineArgumentParser)
        code = exit.code
    err = capsys.readouterr().err
    assert code == 2 and said in err and err.count("\n") == 1 and "Traceback" not in err
    assert not started


def test_without_streamlit_it_names_the_extra(started, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "streamlit" else real(name)
    )
    assert start([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'deffcore[app]'" in err
    assert not started


def test_run_file_is_checked_and_kept_before_the_server_starts(
    started, capsys, tmp_path, snapshot_body
):
    from deffcore.views.sharing import open_shared, read_snapshot, shared_dir

    bad = tmp_path / "run.json"
    bad.write_bytes(snapshot_body[:-40])  # truncated
    assert start(["--run", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == "error: run.json is not valid JSON, so it is not a run snapshot.\n"
    assert not started and not shared_dir().exists()  # nothing kept, nothing started
    assert start(["--run", str(tmp_path / "missing.json")]) == 2
    assert "missing.json cannot be read" in capsys.readouterr().err and not started

    good = tmp_path / "good.json"
    good.write_bytes(snapshot_body)
    assert start(["--run", str(good)]) == 0
    ((_, _, env),) = started
    kept = open_shared(env[APP_RUN_ENV])  # the app opens the kept copy by its content id
    assert kept.sha256 == hashlib.sha256(snapshot_body).hexdigest()
    assert kept.path.parent == shared_dir() and kept.path.read_bytes() == snapshot_body
    assert kept.headline() == read_snapshot(snapshot_body).headline()
    assert f"Opening the shared run {kept.label}" in capsys.readouterr().out


def test_the_explorer_files_of_an_install_are_found_in_explorer_app(tmp_path, monkeypatch):
    assert app.app_files() == REPO  # a checkout: its root
    installed = tmp_path / "site-packages" / "explorer"
    (installed / "_app" / "pages").mkdir(parents=True)
    (installed / "_app" / "app.py").write_text("")
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: (
            SimpleNamespace(submodule_search_locations=[str(installed)])
            if name == "explorer"
            else real(name)
        ),
    )
    assert app.app_files() == installed / "_app"
    (installed / "_app" / "app.py").unlink()  # a broken install: one sentence
    with pytest.raises(main.DeffError, match="not in this install"):
        app.app_files()


def test_a_label_from_someone_elses_file_cannot_drive_the_terminal():
    assert app._printable("tiny\x1b[2J\x07 run") == "tiny?[2J? run"
