"""The installable package: pyproject's dependency ranges admit the tested pins, and (slow) the
wheel built from this tree installs into a fresh venv outside the repository and works there.

The slow test is what a new user does: build the wheel, make a fresh venv (no
--system-site-packages: nothing of the project's venv is visible), install the wheel with
`-c requirements.txt`, so pip resolves the wheel's *declared* dependencies (a missing one
fails here) but takes every pinned package at its pinned version (torch==2.13.0 is the CPU
file on this machine kind's disk: no CUDA build is downloaded), then run `deffcore --help`,
`deffcore measure --model tiny-llama ... --json` and `import deffcore` from a folder that is
not the repository. Measured on the 2-core CI machine: ~2 s to build, ~2 min to install
(1.7 GB, mostly torch; the other wheels come from PyPI), ~10 s for the commands.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
#: Not shipped in the wheel: everything but the library.
NOT_SHIPPED = ("tests", "benchmarks", "pages", "cache", "scripts", "docs", "app.py", "ui_common.py")
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
            pins[canonicalize_name(name)] = version.strip()
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
    assert PYPROJECT["project"]["scripts"] == {"deffcore": "deffcore.cli:main"}


def test_installed_package_caches_in_the_users_cache_not_site_packages(tmp_path, monkeypatch):
    from deffcore import paths

    monkeypatch.delenv("DEFF_CACHE_DIR")
    assert paths.cache_dir() == REPO / "cache"  # a source checkout keeps <repo>/cache
    monkeypatch.setattr(paths, "REPO_CACHE", tmp_path / "site-packages" / "cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.cache_dir() == tmp_path / "xdg" / "deffcore"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.cache_dir() == tmp_path / "home" / ".cache" / "deffcore"
    assert not (tmp_path / "site-packages").exists()


def test_a_missing_extra_gets_one_sentence(monkeypatch, capsys):
    """`deffcore sweep` without Ray (an install without the `sweep` extra): one line, exit 2."""
    import builtins

    from deffcore import cli

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError("No module named 'ray'", name="ray")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    code = cli.main(["sweep", "--models", "tiny-llama", "--n", "8", "--engine", "ray"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "pip install 'deffcore[sweep]'" in err and "Traceback" not in err
    assert set(cli.EXTRAS.values()) <= set(PYPROJECT["project"]["optional-dependencies"])


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
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"deffcore", re.sub(r"-py3.*", "", wheel.name) + ".dist-info"}, tops
    for path in DATA_FILES:
        assert path in names, f"{path} is not in the wheel"
    assert not [n for n in names if n.split("/")[1:2] and n.split("/")[1] in NOT_SHIPPED]
    assert "deffcore/commands/measure.py" in names and "deffcore/labs/pruning.py" in names
    entry = [n for n in names if n.endswith("entry_points.txt")]
    assert "deffcore = deffcore.cli:main" in zipfile.ZipFile(wheel).read(entry[0]).decode()


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


IMPORT_CHECK = """
import json, pathlib
import numpy as np
import deffcore as dc
from deffcore.paper import paper_rows
from deffcore.snapshot import DEFAULT_RUN_PATH, load_gallery
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
    from deffcore.measurement import measure

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
                str(wheel),
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
    finally:
        shutil.rmtree(work, ignore_errors=True)
