"""MkDocs hooks (mkdocs.yml `hooks:`): the two reference pages, generated from the code at build
time so that neither can drift from it.

- `reference/api.md`: every name of `deffcore.__all__` (what `import deffcore as dc` offers,
  the lazily imported ones included), each documented by mkdocstrings from its docstring. The
  page is built from the objects themselves (each one's defining module is looked up when the
  site is built), so moving a module moves its entry and never breaks the build.
- `reference/cli.md`: the `--help` of `deffcore` and of every subcommand, from the argparse
  parser the command itself builds.

Not part of the package: the docs site is built from a clone (`mkdocs build --strict`, run by
tests/test_docs_site.py).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

API_PAGE = "reference/api.md"
CLI_PAGE = "reference/cli.md"
#: Where `build_parser()` lives: the CLI module before and after the stage restructure.
PARSER_MODULES = ("deffcore.cli", "deffcore.cli.main")
#: Width of the generated `--help` text (argparse reads it from $COLUMNS).
HELP_COLUMNS = 100


def on_config(config: Any) -> Any:
    """Import deffcore from this clone (the folder of mkdocs.yml), installed or not, and read
    snippets (`--8<-- "BENCHMARKS.md"`) from it, wherever mkdocs was started."""
    root = str(Path(config.config_file_path).resolve().parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    config.mdx_configs.setdefault("pymdownx.snippets", {})["base_path"] = [root]
    return config


def on_files(files: Any, config: Any) -> Any:
    """Add the two generated pages to the site's files (mkdocs calls this once per build)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, API_PAGE, content=api_page()))
    files.append(File.generated(config, CLI_PAGE, content=cli_page()))
    return files


# --- API reference ------------------------------------------------------------------------


def _assigns(module: ModuleType, name: str) -> bool:
    """Whether `module`'s source assigns `name` at top level (defines it, not imports it)."""
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return False
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, ast.Assign | ast.AnnAssign) and any(
            isinstance(t, ast.Name) and t.id == name for t in targets
        ):
            return True
    return False


def defining_path(name: str, obj: Any) -> str:
    """The dotted path where `obj` (public as `deffcore.<name>`) is defined: a module's own
    name, a function's or class's `__module__.__qualname__`, or for a constant the deffcore
    module whose source assigns it."""
    if inspect.ismodule(obj):
        return obj.__name__
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return f"{obj.__module__}.{obj.__qualname__}"
    owners = [
        module_name
        for module_name, module in sorted(sys.modules.items())
        if module_name.startswith("deffcore.")
        and getattr(module, name, None) is obj
        and _assigns(module, name)
    ]
    if len(owners) != 1:
        raise RuntimeError(f"deffcore.{name}: defined in {owners or 'no module'}, not in one")
    return f"{owners[0]}.{name}"


def public_api() -> dict[str, str]:
    """{public name: defining path} for every name of `deffcore.__all__`, in its order."""
    import deffcore

    return {name: defining_path(name, getattr(deffcore, name)) for name in deffcore.__all__}


def _summary(module_name: str) -> str:
    doc = inspect.getdoc(importlib.import_module(module_name)) or ""
    return doc.strip().split("\n\n", 1)[0].replace("\n", " ")


def api_page() -> str:
    """Markdown for mkdocstrings: one section per defining module (in the order its first
    name appears in `__all__`), one entry per public name, headed `dc.<name>`."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for name, path in public_api().items():
        module = path if _is_module(path) else path.rsplit(".", 1)[0]
        groups.setdefault(module, []).append((name, path))
    lines = [
        "# API reference",
        "",
        "Everything `import deffcore as dc` offers: the names of `deffcore.__all__`, each under "
        "the name you use (`dc.measure`). The page is generated from the docstrings when the "
        "site is built; the section titles name the module that defines each object.",
        "",
    ]
    for module, entries in groups.items():
        lines += [f"## `{module}`", "", _summary(module), ""]
        for name, path in entries:
            lines += [
                f"::: {path}",
                "    options:",
                f'      heading: "dc.{name}"',
                f'      toc_label: "dc.{name}"',
                "      show_root_heading: true",
                "      heading_level: 3",
                *(["      members: false"] if _is_module(path) else []),
                "",
            ]
    return "\n".join(lines)


def _is_module(path: str) -> bool:
    return path in sys.modules and inspect.ismodule(sys.modules[path])


# --- CLI reference ------------------------------------------------------------------------


@contextmanager
def _as_installed() -> Iterator[None]:
    """Help text as a user of the installed command sees it: `deffcore ...` (the program name
    follows argv[0]), wrapped at HELP_COLUMNS."""
    argv0, columns = sys.argv[0], os.environ.get("COLUMNS")
    sys.argv[0], os.environ["COLUMNS"] = "deffcore", str(HELP_COLUMNS)
    try:
        yield
    finally:
        sys.argv[0] = argv0
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns


def build_parser() -> argparse.ArgumentParser:
    """deffcore's own parser (`build_parser()` of the CLI module)."""
    for module_name in PARSER_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            continue
        if callable(getattr(module, "build_parser", None)):
            return module.build_parser()
    raise RuntimeError(f"no build_parser() in any of {PARSER_MODULES}")


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """{name: parser} of every subcommand, in the order `--help` lists them."""
    (action,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _one_line_help(parser: argparse.ArgumentParser, name: str) -> str:
    (action,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in action._choices_actions}
    return helps.get(name, "").replace("|", "\\|").replace("<", "&lt;")


def cli_page() -> str:
    """Markdown: a table of the subcommands, then each one's `--help` as printed."""
    with _as_installed():
        parser = build_parser()
        commands = subcommands(parser)
        lines = [
            "# Command-line reference",
            "",
            "`deffcore <command>` (the installed command) or `python -m deffcore <command>` "
            "(a clone): the same arguments and output. This page is the `--help` of each "
            "subcommand, generated from the parser when the site is built. The "
            "[command-line guide](../cli.md) shows them in use.",
            "",
            "| command | what it does |",
            "|---|---|",
            *(f"| [`{n}`](#{n}) | {_one_line_help(parser, n)} |" for n in commands),
            "",
            "```text",
            parser.format_help().rstrip(),
            "```",
            "",
        ]
        for name, sub in commands.items():
            lines += [f"## `{name}` {{#{name}}}", "", "```text", sub.format_help().rstrip()]
            lines += ["```", ""]
    return "\n".join(lines)
