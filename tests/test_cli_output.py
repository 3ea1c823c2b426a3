"""What a subcommand prints (`deffcore.cli._output.answer`): the result alone on stdout, as one
JSON object with --json or as the command's table, with the progress bar on stderr."""

from __future__ import annotations

import argparse
import json

from deffcore.cli._output import answer


def _compute(bar):
    print("a library's chatter")  # goes to stderr, never into the result
    bar(1, 2, "half way")
    return {"x": float("nan"), "n": 3}


def test_answer_prints_the_result_alone_as_json_or_as_the_table(capsys):
    args = argparse.Namespace(json=True, no_progress=True)
    assert answer(args, "step", _compute, lambda d: "unused") == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"x": None, "n": 3}  # NaN written as null
    assert "a library's chatter" in err and "half way" not in err  # no bar with --no-progress

    args = argparse.Namespace(json=False, no_progress=False)
    assert answer(args, "step", _compute, lambda d: f"table of {d['n']}") == 0
    out, err = capsys.readouterr()
    assert out == "table of 3\n"
    assert "a library's chatter" in err and "half way" in err  # the bar, on stderr
