"""`deffcore app`: start the Effective Depth Explorer (Streamlit) from a clone or an install.

The explorer's entry files are the checkout's `app.py`, `pages/` and `.streamlit/config.toml`;
a wheel carries the same files as `explorer/_app/` (pyproject's build-time mapping). This
command never imports Streamlit: it checks that Streamlit is installed (else one sentence
naming `pip install 'deffcore[app]'`), checks `--run FILE` before the server starts, and hands
over to `python -m streamlit run` with every setting of the shipped config passed as a flag (an
install has no `.streamlit/` in the user's folder, and another folder's config must not change
the server). It listens on localhost unless `--address` says otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from deffcore.core.errors import DeffError

DEFAULT_ADDRESS = "localhost"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "app",
        help="start the Effective Depth Explorer in the browser",
        description="Start the Streamlit explorer (needs the app extra: pip install "
        "'deffcore[app]'). It listens on this machine only unless --address says otherwise.",
    )
    p.add_argument(
        "--port", type=int, default=None, help="port to listen on (default: Streamlit's, 8501)"
    )
    p.add_argument(
        "--address",
        default=DEFAULT_ADDRESS,
        help="address to listen on (default: localhost; 0.0.0.0 serves every network, see "
        "the docs' 'Serving and security', docs/serving.md)",
    )
    p.add_argument(
        "--run",
        metavar="FILE",
        default=None,
        help="a shared run snapshot (JSON) to open as the current run; checked before the "
        "server starts and kept among the shared runs",
    )
    p.set_defaults(func=run)


def app_files() -> Path:
    """The folder holding the explorer's `app.py`, `pages/` and `.streamlit/config.toml`:
    `explorer/_app` of an install, the checkout's root in a clone."""
    spec = importlib.util.find_spec("explorer")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for package in map(Path, locations):
        for folder in (package / "_app", package.parent):
            if (folder / "app.py").is_file() and (folder / "pages").is_dir():
                return folder
    raise DeffError(
        "The explorer's files (app.py, pages/) are not in this install; reinstall deffcore "
        "with pip install 'deffcore[app]'."
    )


def config_flags(config: Path) -> list[str]:
    """Every setting of a Streamlit config.toml as `--section.key=value` flags."""
    try:
        settings = tomllib.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise DeffError(f"The explorer's settings {config} cannot be read ({err}).") from None
    return [f"--{name}={_flag_value(value)}" for name, value in _flatten(settings)]


def _flatten(table: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in table.items():
        name = f"{prefix}{key}"
        rows += _flatten(value, f"{name}.") if isinstance(value, dict) else [(name, value)]
    return rows


def _flag_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def check_listen(address: str, port: int | None) -> None:
    if port is not None and not 1 <= port <= 65535:
        raise DeffError(f"--port must be between 1 and 65535, got {port}.")
    if not address or any(c.isspace() for c in address):
        raise DeffError(f"--address must be a host name or IP address, got {address!r}.")


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def streamlit_command(files: Path, address: str, port: int | None) -> list[str]:
    """`python -m streamlit run <flags> <files>/app.py`: the shipped config, then where to
    listen (options come before the script: what follows it would be the script's own)."""
    flags = config_flags(files / ".streamlit" / "config.toml")
    flags.append(f"--server.address={address}")
    if port is not None:
        flags.append(f"--server.port={port}")
    return [sys.executable, "-m", "streamlit", "run", *flags, str(files / "app.py")]


def run(args: argparse.Namespace) -> int:
    check_listen(args.address, args.port)
    if importlib.util.find_spec("streamlit") is None:
        # cli.main turns this into one sentence: pip install 'deffcore[app]'
        raise ModuleNotFoundError("No module named 'streamlit'", name="streamlit")
    command = streamlit_command(app_files(), args.address, args.port)
    from deffcore.views.sharing import APP_RUN_ENV, share_file

    env = {k: v for k, v in os.environ.items() if k != APP_RUN_ENV}
    if args.run is not None:
        shared = share_file(args.run)  # checked and kept before the server starts
        env[APP_RUN_ENV] = shared.sha256[:16]
        print(f"Opening the shared run {_printable(shared.label)} ({env[APP_RUN_ENV]}).")
    if not is_loopback(args.address):
        print(
            f"Listening on {args.address}: anyone who can reach it can run models on this "
            "machine (docs/serving.md: 'Serving and security')."
        )
    sys.stdout.flush()  # before the process becomes the server
    if os.name == "posix":  # become the server: Ctrl-C and kill reach Streamlit itself
        os.execve(sys.executable, command, env)
    try:
        return subprocess.call(command, env=env)
    except KeyboardInterrupt:
        return 130


def _printable(text: str) -> str:
    """A run's label from someone else's file, safe for a terminal (no escape sequences)."""
    return "".join(c if c.isprintable() else "?" for c in text)
