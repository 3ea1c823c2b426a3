"""Where the paper's published values live (`paper_reference.csv`): display only, never a result.

The CSV (columns `source, model, layers, dataset, setting, quantity, value, note`) ships in
the project's `shared/` folder, which sits beside the repository checkout. Lookup order:
`$DEFF_PAPER_REFERENCE`, `../shared/paper_reference.csv`, `./shared/paper_reference.csv`.
"""

from __future__ import annotations

import os
from pathlib import Path

from deffcore.errors import DeffError

_REPO = Path(__file__).resolve().parents[1]


def paper_reference_path() -> Path | None:
    """The CSV's path, or None when it is not found."""
    env = os.environ.get("DEFF_PAPER_REFERENCE")
    candidates = [Path(env)] if env else []
    candidates += [
        _REPO.parent / "shared" / "paper_reference.csv",
        _REPO / "shared" / "paper_reference.csv",
    ]
    return next((p for p in candidates if p.is_file()), None)


def require_paper_reference_path() -> Path:
    """The CSV's path; raises DeffError with what to do when it is not found."""
    path = paper_reference_path()
    if path is None:
        raise DeffError(
            "The paper's reference values (paper_reference.csv) were not found beside the "
            "repository; set DEFF_PAPER_REFERENCE to its path."
        )
    return path
