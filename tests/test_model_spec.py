"""The model spec, parsed once (`deffcore.inputs.model`, SPEC section 8): every form reads
back to its own text, a malformed one is one sentence naming its form, and no module but the
parser tests a spec's prefix."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import asdict
from pathlib import Path

import pytest

from deffcore.core.errors import DeffError, UnknownModelError
from deffcore.inputs.model import Kind, ModelSpec, split_random
from deffcore.inputs.run_spec import RunSpec

ROOT = Path(__file__).resolve().parents[1]
PARSER = "deffcore/inputs/model.py"


def _forms(tmp_path: Path) -> list[tuple[str, Kind]]:
    folder = tmp_path / "my-model"
    folder.mkdir()
    return [
        ("smollm2-135m", Kind.PACKAGED),
        ("gemma3-270m", Kind.PACKAGED),
        ("tiny-llama", Kind.TINY),
        ("tiny-gpt2-nobos", Kind.TINY),
        ("llama-3.1-8b", Kind.SHAPE),
        ("random:smollm2-135m:0", Kind.RANDOM),
        ("random:llama-3.1-8b:12", Kind.RANDOM),
        ("random:loaded:my-ft@v3:1", Kind.RANDOM),  # a notebook model's null: colons in the base
        (f"random:{folder}:3", Kind.RANDOM),
        ("loaded:3f2a9c", Kind.LOADED),
        ("states:my run", Kind.STATES),
        ("/models/model.Q4.gguf", Kind.GGUF),
        ("~/weights.gguf", Kind.GGUF),
        (str(folder), Kind.FOLDER),
        ("EleutherAI/pythia-70m", Kind.HUB),
        ("./no/such/folder", Kind.HUB),  # not there: the load names it (not a folder yet)
    ]


def test_every_form_round_trips_text_to_spec_to_text(tmp_path):
    for text, kind in _forms(tmp_path):
        spec = ModelSpec.parse(text)
        assert spec.kind is kind, text
        assert str(spec) == spec.text == text
        assert ModelSpec.parse(str(spec)) == spec
        assert ModelSpec.parse(spec) is spec  # a parsed spec passes through a door unchanged


def test_the_parts_of_each_form(tmp_path):
    rnd = ModelSpec.parse("random:loaded:my-ft@v3:1")
    assert rnd.base == ModelSpec("loaded:my-ft@v3", Kind.LOADED) and rnd.seed == 1
    assert rnd.base.label == "my-ft@v3" and rnd.trained is rnd.base
    nested = ModelSpec.parse("random:random:tiny-llama:1:2")
    assert nested.seed == 2 and nested.trained.text == "tiny-llama"
    tiny = ModelSpec.parse("tiny-gpt2-nobos")
    assert (tiny.tiny_arch, tiny.tiny_adds_bos) == ("gpt2", False)
    assert (
        ModelSpec.parse("tiny-llama").tiny_arch,
        ModelSpec.parse("tiny-llama").tiny_adds_bos,
    ) == (
        "llama",
        True,
    )
    assert ModelSpec.parse("~/weights.gguf").path == Path("~/weights.gguf").expanduser()
    assert ModelSpec.random("tiny-llama", 4).text == "random:tiny-llama:4"
    assert ModelSpec.random(ModelSpec.parse("smollm2-135m"), 0) == ModelSpec.parse(
        "random:smollm2-135m:0"
    )
    assert ModelSpec.parse("states:x").external and ModelSpec.parse("loaded:x").external
    assert not ModelSpec.parse("tiny-llama").external
    assert ModelSpec.parse("tiny-llama").random_weights and rnd.random_weights
    assert not ModelSpec.parse("smollm2-135m").random_weights


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("random:tiny-llama", "must look like 'random:<model>:<seed>'"),
        ("random:tiny-llama:x", "must look like 'random:<model>:<seed>'"),
        ("random::3", "must look like 'random:<model>:<seed>'"),
        # a seed int() refuses, a second name of seed 1, a negative or a beyond-64-bit seed
        ("random:tiny-llama:\u00b2", "with a whole-number seed from 0 to 9223372036854775807"),
        ("random:tiny-llama:\u0661", "must look like 'random:<model>:<seed>'"),
        ("random:tiny-llama:-1", "must look like 'random:<model>:<seed>'"),
        ("random:tiny-llama:9223372036854775808", "must look like 'random:<model>:<seed>'"),
        ("tiny-nope", "Unknown tiny model 'tiny-nope'; tiny models are: tiny-llama"),
        ("random:tiny-nope:1", "Unknown tiny model 'tiny-nope'"),
        ("", "The model spec is empty"),
        ("   ", "The model spec is empty"),
    ],
)
def test_a_malformed_spec_is_one_sentence_naming_its_form(text, match):
    with pytest.raises(UnknownModelError, match=re.escape(match)) as err:
        ModelSpec.parse(text)
    assert isinstance(err.value, DeffError) and "\n" not in str(err.value)


def test_the_largest_seed_is_a_random_model_and_beyond_it_is_refused():
    top = ModelSpec.parse("random:tiny-llama:9223372036854775807")
    assert top.seed == 2**63 - 1 and ModelSpec.random("tiny-llama", 2**63 - 1) == top
    with pytest.raises(DeffError, match="seed must be at most 9,223,372,036,854,775,807"):
        ModelSpec.random("tiny-llama", 2**63)
    with pytest.raises(DeffError, match="seed must be an integer >= 0, got -1"):
        ModelSpec.random("tiny-llama", -1)


def test_split_random_leaves_the_base_unread():
    assert split_random("random:tiny-nope:3") == ("tiny-nope", 3)  # its cell reports tiny-nope
    assert split_random("tiny-llama") is None
    with pytest.raises(UnknownModelError, match="random:<model>:<seed>"):
        split_random("random:tiny-llama")


def test_a_stored_spec_never_raises():
    assert ModelSpec.stored("tiny-renamed") == ModelSpec("tiny-renamed", Kind.HUB)
    assert ModelSpec.stored("random:tiny-llama:2").seed == 2
    renamed = ModelSpec.stored("random:tiny-renamed:2")  # the base as the old code took it
    assert renamed.base == ModelSpec("tiny-renamed", Kind.HUB) and renamed.seed == 2
    assert ModelSpec.stored("random:x") == ModelSpec("random:x", Kind.HUB)


def test_run_spec_keeps_the_text_and_its_door_parses_it(tiny_dataset):
    from deffcore.runs.measure import run_spec

    fields = dict(revision=None, dataset="bbc-news", n=4, max_tokens=8, seed=0, dtype="float32")
    spec = RunSpec(model=ModelSpec.parse("random:tiny-llama:3"), **fields)
    assert spec.model == "random:tiny-llama:3" and isinstance(spec.model, str)
    assert asdict(spec)["model"] == "random:tiny-llama:3"  # the key hashes the same string
    assert spec.__dict__ == asdict(spec)  # a stored run's fields (`{**spec.__dict__}`): no more
    assert spec == RunSpec(model="random:tiny-llama:3", **fields)
    assert spec.model_spec.kind is Kind.RANDOM and spec.model_spec.seed == 3
    # a stored run (a colleague's snapshot) opens whatever its model says
    assert RunSpec(model="tiny-renamed", **fields).model_spec.kind is Kind.HUB
    made, _ = run_spec(ModelSpec.parse("tiny-llama"), tiny_dataset, 4, 8, 0, "cka")
    assert made.model == "tiny-llama"
    with pytest.raises(UnknownModelError, match="Unknown tiny model 'tiny-nope'"):
        run_spec("tiny-nope", tiny_dataset, 4, 8, 0, "cka")  # a new run: refused at its door


def test_the_identity_of_each_kind_is_unchanged(tmp_path):
    """The cache keys' weights ids, pinned to what the string-reading code gave."""
    from deffcore.inputs.model import model_identity

    assert model_identity("tiny-llama")["weights_id"] == "tiny-seed0:33f4cd2be07231be"
    assert model_identity(ModelSpec.parse("random:tiny-llama:3")) == {
        "model": "random:tiny-llama:3",
        "source": "random",
        "seed": 3,
        "base": {
            "model": "tiny-llama",
            "source": "tiny",
            "weights_id": "tiny-seed0:33f4cd2be07231be",
        },
        "weights_id": "random-init:seed3:config-of:tiny-seed0:33f4cd2be07231be",
    }
    assert model_identity("org/name", "v1")["weights_id"] == "revision:v1"
    assert model_identity("loaded:abc")["source"] == "hub"
    # a stored run's unknown tiny name keys as the hub id the string-reading code made of it
    assert model_identity("tiny-llama<script>")["source"] == "hub"
    assert model_identity("random:tiny-nope:1")["base"]["source"] == "hub"
    assert model_identity("/no/such.gguf")["source"] == "hub"  # a missing file: as before
    folder = tmp_path / "x.gguf"
    folder.mkdir()
    assert model_identity(str(folder))["source"] == "folder"  # a folder named .gguf


# A prefix (or suffix) test of a model spec's string form outside the parser: a bare prefix
# literal (`startswith("random:")`, `("random:", "tiny-")`, `removeprefix("loaded:")`), a regex
# over the form, or a `.gguf` suffix test.
_PREFIXES = {"random:", "tiny-", "tiny:", "states:", "loaded:"}
_REGEX = re.compile(r"^\^?(random:|states:|loaded:|tiny-|tiny:)\S*(\(\.|\\[dw]|\[)")
_GGUF = re.compile(r"""endswith\(\s*["']\.gguf["']|suffix\s*[!=]=\s*["']\.gguf["']""")


def spec_prefix_tests(
    root: Path,
    prefixes: set[str] = _PREFIXES,
    regex: re.Pattern[str] = _REGEX,
    parser: str = PARSER,
    suffix: re.Pattern[str] | None = _GGUF,
    allowed: frozenset[str] = frozenset(),
) -> list[str]:
    """Every model-spec prefix test (or, given a spec's `prefixes`, `regex`, `parser` and
    `suffix` test, another spec's: tests/test_dataset_spec.py) in deffcore/, explorer/,
    pages/ and app.py under `root`, outside the parser and the `allowed` files, as
    'path:line: what'."""
    files = [*root.glob("deffcore/**/*.py"), *root.glob("explorer/**/*.py")]
    files += [*root.glob("pages/*.py"), *root.glob("app.py")]
    found = []
    for path in sorted(files):
        rel = path.relative_to(root).as_posix()
        if rel == parser or rel in allowed:
            continue
        source = path.read_text(encoding="utf-8")
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type != tokenize.STRING:
                continue
            try:
                value = ast.literal_eval(tok.string)
            except (ValueError, SyntaxError):  # an f-string builds a spec; it tests none
                continue
            if isinstance(value, str) and (value in prefixes or regex.match(value)):
                found.append(f"{rel}:{tok.start[0]}: {value!r}")
        for number, line in enumerate(source.splitlines(), 1):
            if suffix is not None and suffix.search(line):
                found.append(f"{rel}:{number}: {line.strip()}")
    return found


def test_no_module_but_the_parser_tests_a_spec_prefix():
    found = spec_prefix_tests(ROOT)
    assert not found, "read the parsed ModelSpec (kind, base, seed) instead:\n" + "\n".join(found)


def test_the_prefix_scan_finds_each_form_of_test(tmp_path):
    """The scan is not blind: the forms the string-reading code used are each found."""
    mod = tmp_path / "deffcore" / "x.py"
    mod.parent.mkdir()
    mod.write_text(
        'a = spec.startswith("random:")\n'
        'b = spec.startswith(("loaded:", "states:"))\n'
        'RANDOM = ("random:", "tiny-")\n'
        'c = re.fullmatch(r"random:(.+):(\\d+)", spec)\n'
        'd = spec.endswith(".gguf")\n'
        'e = path.suffix == ".gguf"\n'
        'ok = f"random:{base}:{seed}"\n'
        'doc = "random:<model>:<seed> is a null"\n'
    )
    lines = sorted({int(hit.split(":")[1]) for hit in spec_prefix_tests(tmp_path)})
    assert lines == [1, 2, 3, 4, 5, 6]
