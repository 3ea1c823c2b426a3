"""The installable package: pyproject's dependency ranges admit the tested pins, the wheel
carries the library and the explorer (its entry files mapped from the checkout's root), and
(slow) the wheel built from this tree installs into a fresh venv outside the repository and
works there, explorer included.

The slow test is what a new user does: build the wheel, make a fresh venv (no
--system-site-packages: nothing of the project's venv is visible), install `<wheel>[app]` with
`-c requirements.txt`, so pip resolves the wheel's *declared* dependencies (a missing one
fails here) but takes every pinned package at its pinned version (torch==2.13.0 is the CPU
file on this machine kind's disk: no CUDA build is downloaded), then, from a folder that is
not the repository: `deffcore --help`, `deffcore measure --model tiny-llama ... --json
--snapshot`, `import deffcore`, `deffcore app --port P --run <that snapshot>` until
`/_stcore/health` answers 200 (then the server is stopped), and the installed app's pages under
AppTest with that shared run opened. Measured on the 2-core CI machine: ~2 s to build, ~2 min
to install the core (1.7 GB, mostly torch; the other wheels come from PyPI), ~10 s for the
commands.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
#: Not shipped in the wheel: everything but the library and the explorer.
NOT_SHIPPED = ("tests", "benchmarks", "cache", "scripts", "docs", "ui_common.py")
#: The explorer's entry files, where a checkout has them -> where the wheel has them (the
#: build-time mapping of pyproject's [tool.setuptools.package-dir]).
APP_FILES = {
    "app.py": "explorer/_app/app.py",
    ".streamlit/config.toml": "explorer/_app/.streamlit/config.toml",
    **{f"pages/{p.name}": f"explorer/_app/pages/{p.name}" for p in (REPO / "pages").glob("*.py")},
}
DATA_FILES = (
    "deffcore/data/default_run.json",
    "deffcore/data/paper_reference.csv",
    "deffcore/data/gallery/gemma3-270m_N512_windows.json",
)


def _pins(path: Path) -> dict[str, str]:
    """{canonical name: version} of the `name==version` lines of a requirements file (and the
    files it includes with -r)."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            pins |= _pins(path.parent / line[3:].strip())
        elif "==" in line:
            name, version = line.split("==", 1)
            pins[canonicalize_name(name.split("[", 1)[0])] = version.strip()  # drop [extras]
    return pins


def _declared() -> dict[str, list[Requirement]]:
    project = PYPROJECT["project"]
    groups = {"core": project["dependencies"], **project["optional-dependencies"]}
    return {group: [Requirement(r) for r in reqs] for group, reqs in groups.items()}


def test_every_pin_lies_in_the_declared_range_and_every_dependency_is_pinned():
    """requirements*.txt stay the tested set: each declared dependency has a pin inside its
    range, and each pinned runtime package is declared (core or an extra)."""
    pins = _pins(REPO / "requirements-dev.txt")
    runtime = _pins(REPO / "requirements.txt")
    declared = _declared()
    for group, reqs in declared.items():
        for req in reqs:
            name = canonicalize_name(req.name)
            assert name in pins, f"{req} ({group}) has no pin in requirements*.txt"
            assert req.specifier.contains(pins[name], prereleases=True), (
                f"{req} ({group}) excludes the tested pin {name}=={pins[name]}"
            )
    names = {canonicalize_name(r.name) for reqs in declared.values() for r in reqs}
    assert set(runtime) <= names, f"pinned but not declared: {sorted(set(runtime) - names)}"
    # torch is a range (any build the user installed first), never an exact CUDA pin
    (torch,) = [r for r in declared["core"] if r.name == "torch"]
    assert str(torch.specifier) == ">=2.3"
    assert PYPROJECT["project"]["scripts"] == {"deffcore": "deffcore.cli.main:main"}


def test_installed_package_caches_in_the_users_cache_not_site_packages(tmp_path, monkeypatch):
    from deffcore.core import files as paths

    monkeypatch.delenv("DEFF_CACHE_DIR")
    assert paths.cache_dir() == REPO / "cache"  # a source checkout keeps <repo>/cache
    monkeypatch.setattr(paths, "REPO_CACHE", tmp_path / "site-packages" / "cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.cache_dir() == tmp_path / "xdg" / "deffcore"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.cache_dir() == tmp_path / "home" / ".cache" / "deffcore"
    assert not (tmp_path / "site-packages").exists()


def test_the_package_list_names_every_package_folder():
    """pyproject lists the packages (the explorer's entry files are a mapped package, which
    setuptools' find cannot see): a new subpackage must not silently miss the wheel."""
    folders = {
        ".".join(p.relative_to(REPO).parts)
        for top in ("deffcore", "explorer")
        for p in [REPO / top, *(REPO / top).rglob("*")]
        if p.is_dir() and p.name != "__pycache__" and any(p.iterdir())
    }
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert set(setuptools["packages"]) == folders | {"explorer._app", "explorer._app.pages"}
    assert setuptools["package-dir"] == {"explorer._app": "."}  # app.py, pages/ stay at the root


def test_a_missing_extra_gets_one_sentence(monkeypatch, capsys):
    """`deffcore sweep` without Ray (an install without the `sweep` extra): one line, exit 2."""
    import builtins

    from deffcore.cli import main

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError("No module named 'ray'", name="ray")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    code = main.main(["sweep", "--models", "tiny-llama", "--n", "8", "--engine", "ray"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "pip install 'deffcore[sweep]'" in err and "Traceback" not in err
    assert set(main.EXTRAS.values()) <= set(PYPROJECT["project"]["optional-dependencies"])


def _build_wheel(out: Path) -> Path:
    """The wheel of this tree, built from a copy (the build's egg-info and build/ folders stay
    out of the checkout), with the project venv's pinned setuptools (no download)."""
    src = out / "src"
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(
            ".venv",
            ".git",
            "cache",
            "build",
            "dist",
            "*.egg-info",
            "__pycache__",
            "test-artifacts",
            ".pytest_cache",
            ".ruff_cache",
        ),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out / "dist"),
            str(src),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    (wheel,) = (out / "dist").glob("deffcore-*.whl")
    return wheel


def _check_contents(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"deffcore", "explorer", re.sub(r"-py3.*", "", wheel.name) + ".dist-info"}
    for path in DATA_FILES:
        assert path in names, f"{path} is not in the wheel"
    assert not [n for n in names if n.split("/")[1:2] and n.split("/")[1] in NOT_SHIPPED]
    assert "deffcore/cli/measure.py" in names and "deffcore/labs/pruning.py" in names
    assert "deffcore/cli/app.py" in names
    for module in (REPO / "explorer").glob("*.py"):
        assert f"explorer/{module.name}" in names
    # the explorer's entry files, unchanged, and nothing else of the checkout's root
    for checkout, shipped in APP_FILES.items():
        assert archive.read(shipped) == (REPO / checkout).read_bytes(), shipped
    assert {n for n in names if n.startswith("explorer/_app/")} == set(APP_FILES.values())
    entry = [n for n in names if n.endswith("entry_points.txt")]
    assert "deffcore = deffcore.cli.main:main" in zipfile.ZipFile(wheel).read(entry[0]).decode()


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


IMPORT_CHECK = """
import json, pathlib
import numpy as np
import deffcore as dc
from deffcore.views.paper import paper_rows
from deffcore.views.run import DEFAULT_RUN_PATH, load_gallery
print(json.dumps({
    "file": str(pathlib.Path(dc.__file__).resolve()),
    "default_run": DEFAULT_RUN_PATH.is_file(),
    "gallery": len(load_gallery()),
    "paper_rows": len(paper_rows()),
    "deff_identity": dc.effective_depth(np.eye(8)),  # unrelated layers: D_eff = L
    "lazy": [callable(dc.measure), callable(dc.measure_states), callable(dc.open_snapshot)],
}))
"""


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_wheel_installs_into_a_fresh_venv_and_runs_outside_the_repository(tmp_path):
    from deffcore.runs.measure import measure

    work = Path(tempfile.mkdtemp(prefix="deffcore-wheel-"))  # removed at the end: ~1.7 GB
    try:
        wheel = _build_wheel(work)
        _check_contents(wheel)
        venv = work / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        py, exe = venv / "bin" / "python", venv / "bin" / "deffcore"
        home, outside = work / "home", work / "somewhere-else"
        outside.mkdir()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DEFF_CACHE_DIR")}
        env |= {"HOME": str(home), "HF_HUB_OFFLINE": "1", "PIP_NO_INPUT": "1"}
        env.pop("XDG_CACHE_HOME", None)
        _run(
            [
                str(py),
                "-m",
                "pip",
                "install",
                "-q",
                "-c",
                str(REPO / "requirements.txt"),
                f"{wheel}[app]",  # the explorer's extra: Streamlit at its pin
            ],
            outside,
            env,
            timeout=1500,
        )
        _run([str(py), "-m", "pip", "check"], outside, env)
        freeze = _run([str(py), "-m", "pip", "freeze"], outside, env)
        assert "torch==2.13.0+cpu" in freeze  # the pinned CPU build, never a CUDA one
        assert "nvidia" not in freeze.lower()

        assert "usage: deffcore" in _run([str(exe), "--help"], outside, env)
        out = _run(
            [
                str(exe),
                "measure",
                "--model",
                "tiny-llama",
                "--n",
                "16",
                "--max-tokens",
                "32",
                "--json",
                "--no-progress",
                "--snapshot",
                str(outside / "run.json"),
            ],
            outside,
            env,
        )
        got = json.loads(out)
        assert (got["layers"], got["d_model"], got["n"]) == (4, 64, 16)
        # the installed copy computes what the checkout computes (same code, same pinned torch)
        want = measure(model="tiny-llama", n=16, max_tokens=32).to_dict()
        assert got["key"] == want["key"]
        for pooling, r in want["results"].items():
            assert got["results"][pooling]["deff"] == pytest.approx(r["deff"], rel=1e-6)
        # an install caches in the user's cache folder, never in site-packages
        assert (home / ".cache" / "deffcore" / got["key"] / "meta.json").is_file()

        info = json.loads(_run([str(py), "-c", IMPORT_CHECK], outside, env))
        assert Path(info["file"]).is_relative_to(venv), info["file"]
        assert info["default_run"] and info["gallery"] >= 2 and info["paper_rows"] > 100
        assert info["deff_identity"] == 8.0 and all(info["lazy"])

        shared = _serve_the_app(exe, outside / "run.json", outside, env)
        _check_the_installed_pages(py, shared, outside, env, deff=got["results"]["default"])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_the_app(exe: Path, run_file: Path, cwd: Path, env: dict[str, str]) -> str:
    """`deffcore app --port P --run FILE` until /_stcore/health answers 200 on localhost, then
    stopped; returns the shared run's content id it printed."""
    port = _free_port()
    server = subprocess.Popen(
        [str(exe), "app", "--port", str(port), "--run", str(run_file)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the server and anything it starts are one group to stop
    )
    try:
        status, deadline = None, time.monotonic() + 300
        while status != 200 and time.monotonic() < deadline and server.poll() is None:
            try:
                url = f"http://localhost:{port}/_stcore/health"
                with urllib.request.urlopen(url, timeout=5) as reply:
                    status = reply.status
            except OSError:
                time.sleep(1)
        assert status == 200, f"no health answer (exit {server.poll()})"
        with urllib.request.urlopen(f"http://localhost:{port}/", timeout=10) as page:
            assert page.status == 200 and b"<html" in page.read().lower()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            out, _ = server.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            out, _ = server.communicate()
    found = re.search(r"Opening the shared run .* \(([0-9a-f]{16})\)\.", out)
    assert found, out
    return found.group(1)


PAGES_CHECK = """
import json, os, pathlib, sys
import explorer
from streamlit.testing.v1 import AppTest

app = pathlib.Path(explorer.__file__).parent / "_app" / "app.py"
at = AppTest.from_file(str(app), default_timeout=600).run()
view = at.session_state["deff_view"]
out = {"app": str(app), "exceptions": [e.value for e in at.exception],
       "errors": [e.value for e in at.error], "source": view.source, "sha": view.sha256,
       "deff": next(m.value for m in at.metric if m.label == "D_eff")}
at.switch_page("pages/7_Runs.py").run()
out["runs_errors"] = [e.value for e in at.exception] + [e.value for e in at.error]
out["statuses"] = sorted(set(at.dataframe[0].value["status"]))
print(json.dumps(out))
"""


def _check_the_installed_pages(
    py: Path, shared: str, cwd: Path, env: dict[str, str], deff: dict
) -> None:
    """The installed explorer's own files under AppTest: a new session opens the run that
    `deffcore app --run` kept (DEFF_APP_RUN), the first page shows its D_eff, the Runs page
    lists it as shared beside the cached run."""
    got = json.loads(_run([str(py), "-c", PAGES_CHECK], cwd, env | {"DEFF_APP_RUN": shared}))
    assert "site-packages" in got["app"], got["app"]
    assert not got["exceptions"] and not got["errors"] and not got["runs_errors"], got
    assert got["source"] == "shared" and got["sha"].startswith(shared)
    assert got["deff"] == f"{deff['deff']:.3f}"
    assert {"complete", "shared"} <= set(got["statuses"])
