"""The README and the docs site's pages, and the fenced code blocks in them (for the docs tests).

    pages()            README.md, every docs/**/*.md, and every file a page includes with a
                       snippet line (`--8<-- "BENCHMARKS.md"`), repository-relative
    own_pages()        the pages this project writes for the site (not the SPEC, which is kept
                       in step with the shared working definition, nor the design notes or the
                       included files, whose prose other work owns)
    blocks(page)       its fenced blocks (``` or ~~~, at any indentation, e.g. inside a list)
    Block.not_run      the reason of a block marked `title="not run: <reason>"`, else None

An example that cannot run in a test says so in its fence's info string, where the site shows
it as the block's title:

    ```bash title="not run: starts a server (blocks until stopped)"
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
#: Pages whose prose this project does not write here (kept in step elsewhere).
NOT_OWN = {"docs/SPEC.md", "docs/DESIGN.md"}
#: The languages a fence may name: the runnable two, and the ones that are data or output.
RUNNABLE = ("python", "bash")
KNOWN_LANGUAGES = {*RUNNABLE, "text", "yaml", "json", "toml", "csv"}

_SNIPPET = re.compile(r'^\s*--8<--\s+"(?P<path>[^"]+)"\s*$', re.MULTILINE)
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_NOT_RUN = re.compile(r'\btitle="not run: (?P<reason>[^"]*)"')


@dataclass(frozen=True)
class Block:
    """A fenced block: where it opens, its info string's language and the rest, its text."""

    page: str
    line: int
    language: str
    info: str
    code: str

    @property
    def not_run(self) -> str | None:
        match = _NOT_RUN.search(self.info)
        return match["reason"].strip() if match else None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def _included(page: Path) -> list[Path]:
    return [REPO / m["path"] for m in _SNIPPET.finditer(page.read_text(encoding="utf-8"))]


def pages() -> list[str]:
    """Every page of the README and the site (included files too), repository-relative."""
    found = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
    found += [inc for page in list(found) for inc in _included(page)]
    return list(dict.fromkeys(p.relative_to(REPO).as_posix() for p in found))


def own_pages() -> list[str]:
    included = {p.relative_to(REPO).as_posix() for page in pages() for p in _included(REPO / page)}
    return [p for p in pages() if p not in NOT_OWN | included]


def blocks(page: str) -> list[Block]:
    """The fenced blocks of `page`, each dedented by its fence's indentation."""
    lines = (REPO / page).read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, info = match["indent"], match["fence"], match["info"].strip()
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), len(lines))
        body = [
            ln[len(indent) :] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1 : end]
        ]
        language = info.split(None, 1)[0] if info else ""
        found.append(Block(page, i + 1, language, info, "\n".join(body) + "\n"))
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]
