"""A degenerate control is undefined for its run, not the run's failure.

Every passage starting with the same word makes `first_non_bos` (the state at position 1,
which under causal attention sees only positions 0 and 1) the same for all passages at every
layer: its centred matrix is zero and CKA is undefined. The default pooling and the other
controls are still measured; the control's numbers are null with the reason, in the JSON and
the tables of `measure` and `bos`.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from deffcore.cli.main import main
from deffcore.core.errors import InvalidStatesError, UndefinedSimilarityError
from deffcore.measures.similarity import similarity_matrix
from deffcore.runs.measure import measure

ARGS = ["--model", "tiny-llama", "--n", "8", "--max-tokens", "16", "--no-progress"]


@pytest.fixture
def same_start(tmp_path) -> str:
    """12 different passages, every one starting with "The "."""
    words = ["cat", "river", "budget", "match", "storm", "museum", "film", "council", "train",
             "band", "voters", "shares"]  # fmt: skip
    path = tmp_path / "the.txt"
    path.write_text("\n\n".join(f"The {w} was in the news again on day {i}." for i, w in
                                enumerate(words)))  # fmt: skip
    return str(path)


def test_constant_states_raise_the_specific_error():
    x = np.ones((3, 6, 4), dtype=np.float32)
    with pytest.raises(UndefinedSimilarityError, match="no variance"):
        similarity_matrix(x, "cka")
    assert issubclass(UndefinedSimilarityError, InvalidStatesError)  # old handlers still work


def test_a_constant_control_is_undefined_while_the_others_are_measured(same_start):
    m = measure(model="tiny-llama", dataset=same_start, n=8, max_tokens=16)
    why = m.undefined("first_non_bos")
    assert why is not None and "no variance across passages" in why and "first_non_bos" in why
    assert all(m.undefined(p) is None for p in ("default", "token_normed", "no_pos0", "top1_pc"))
    s = m.summary("first_non_bos")
    assert math.isnan(s.deff) and math.isnan(s.gap_pct) and s.reference_FL == 8 / 5
    assert np.isfinite(m.summary("default").deff)
    out = m.to_dict()
    bad = out["results"]["first_non_bos"]
    assert bad["undefined"] == why and bad["deff"] is None and bad["update_depth"] is None
    assert out["results"]["default"]["undefined"] is None
    assert np.isfinite(out["results"]["default"]["deff"])


def test_measure_cli_json_and_table_show_the_control_as_undefined(same_start, capsys):
    assert main(["measure", "--dataset", same_start, *ARGS, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["results"]["first_non_bos"]["deff"] is None
    assert "no variance" in d["results"]["first_non_bos"]["undefined"]
    assert d["results"]["default"]["deff"] > 0
    assert main(["measure", "--dataset", same_start, *ARGS]) == 0
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if line.startswith("first_non_bos"))
    assert "undefined" in row and "no variance" in row


def test_bos_command_leaves_the_undefined_control_out_of_the_verdict(same_start, capsys):
    assert main(["bos", "--dataset", same_start, *ARGS, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["results"]["first_non_bos"]["gap_pct"] is None
    assert "first_non_bos" not in d["verdict_detail"]["gaps"]
    assert "default" in d["verdict_detail"]["gaps"]
    assert main(["bos", "--dataset", same_start, *ARGS]) == 0
    assert "first_non_bos" in capsys.readouterr().out


def test_a_degenerate_default_is_still_the_runs_error():
    from deffcore.core.constants import EXTRACTED_POOLINGS
    from deffcore.extraction.forward import PooledStates
    from deffcore.inputs.run_spec import RunSpec
    from deffcore.runs.measure import Measurement

    rng = np.random.default_rng(0)
    states = {p: rng.standard_normal((4, 5, 3)).astype(np.float32) for p in EXTRACTED_POOLINGS}
    states["default"][:] = 1.0
    pooled = PooledStates(states, np.ones(4, dtype=np.float32), 0, 40, lengths=np.full(5, 8))
    spec = RunSpec("tiny-llama", None, "bbc-news", 5, 16, 0, "float32")
    with pytest.raises(UndefinedSimilarityError):
        Measurement(spec=spec, pooled=pooled).summary("default")
