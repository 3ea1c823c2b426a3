"""The arguments the subcommands share: the parser, the run options and their checks, comma
lists. What a command prints is `deffcore.cli._output`'s."""

from __future__ import annotations

import argparse
from pathlib import Path

from deffcore.core.constants import BOS_OPTIONS, METRICS, PASSAGE_MODES
from deffcore.core.errors import DeffError


class OneLineArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr, like every other CLI error
    (`error: <sentence>`, exit code 2), instead of the usage block followed by the message."""

    def error(self, message: str) -> None:  # type: ignore[override]
        message = message[:1].upper() + message[1:]
        end = "" if message.endswith(".") else "."
        self.exit(2, f"error: {message}{end} See `{self.prog} --help`.\n")


#: Integer arguments any subcommand may have: attribute -> (flag, smallest allowed value).
_INT_ARGS: dict[str, tuple[str, int]] = {
    "n": ("--n", 1),
    "max_tokens": ("--max-tokens", 2),
    "batch_size": ("--batch-size", 1),
    "n_heldout": ("--n-heldout", 1),
    "d": ("--d", 1),
    "layers": ("--layers", 1),
    "iters": ("--iters", 1),
    "eval_interval": ("--eval-interval", 1),
    "n_embd": ("--n-embd", 1),
    "n_head": ("--n-head", 1),
    "block_size": ("--block-size", 1),
    "max_chars": ("--max-chars", 1),
    "threads": ("--threads", 1),
}


def check_args(args: argparse.Namespace, *, uses_cache: bool = True) -> None:
    """Check every argument `args` has, cheaply, before anything loads.

    Ranges of the integer arguments, the device, output paths (`--snapshot`,
    `--checkpoint-dir`), the cache folder (when the command uses it), the dataset (opened,
    not read) and `--max-tokens` against the model's context length (read from its config).
    Raises a DeffError subclass: the CLI prints its one sentence and exits 2.
    """
    from deffcore.core.checks import (
        check_cache_dir,
        check_int,
        check_passages,
        check_seed,
        check_seeds,
        check_writable_dir,
    )
    from deffcore.inputs.model import check_device, check_max_tokens
    from deffcore.inputs.texts import check_dataset

    for attr, (flag, minimum) in _INT_ARGS.items():
        value = getattr(args, attr, None)
        if value is not None:
            check_int(value, flag, minimum)
    if getattr(args, "n", None) is not None:  # any magnitude: one sentence, nothing allocated
        check_passages(args.n, "--n")
    if getattr(args, "seed", None) is not None:  # a seed any generator takes, a snapshot stores
        check_seed(args.seed, "--seed")
    for attr, flag in (("random_seeds", "--random-seeds"), ("seeds", "--seeds"), ("ks", "--ks")):
        text = getattr(args, attr, None)
        if text:
            if attr != "ks":  # seeds: each in range, none twice
                check_seeds(int_list(text, flag), flag)
                continue
            for value in int_list(text, flag):
                check_int(value, f"Each of {flag}", 0)
    if getattr(args, "device", None) is not None:
        check_device(args.device)
    if getattr(args, "snapshot", None) is not None:
        check_snapshot_output(args)
    if getattr(args, "checkpoint_dir", None):
        check_records_output(args.checkpoint_dir)
        check_writable_dir(args.checkpoint_dir, "--checkpoint-dir")
    if uses_cache:
        check_cache_dir()
    if getattr(args, "model", None) and getattr(args, "max_tokens", None):
        check_max_tokens(args.model, args.max_tokens, getattr(args, "revision", None))
    if getattr(args, "dataset", None):
        check_dataset(args.dataset)


#: What makes a snapshot the same run as a command's arguments (N may be capped by the data).
_SAME_RUN = ("model", "revision", "dataset", "max_tokens", "seed", "passages", "bos")


def check_snapshot_output(args: argparse.Namespace) -> None:
    """`--snapshot PATH`: writable, not an input (`--dataset`, `--model`), not a link, and
    not an existing file other than this run's own snapshot (`core.files.check_output`)."""
    from deffcore.core.files import SNAPSHOT, check_output
    from deffcore.inputs.model import ModelSpec

    # the file a model spec reads (a random null: its base's); the run's own check refuses a
    # malformed spec, after the arguments checked before it
    model = ModelSpec.stored(args.model).trained.text if args.model else None
    check_output(
        args.snapshot,
        "--snapshot",
        marks=(SNAPSHOT,),
        kind="run snapshot",
        inputs={"--dataset": getattr(args, "dataset", None), "--model": model},
        replaceable=lambda path: another_runs_snapshot(path, args),
    )


def check_records_output(folder: str | Path) -> Path:
    """`--checkpoint-dir`'s records.json under the one output rule (`core.files.check_output`):
    never in a cache entry or the package, never replacing a file that is not a lab's records."""
    from deffcore.core.files import LAB_RECORDS, check_output

    return check_output(
        Path(folder).expanduser() / "records.json",
        "--checkpoint-dir",
        marks=(LAB_RECORDS,),
        kind="lab's records file",
    )


def another_runs_snapshot(path: Path, args: argparse.Namespace) -> str | None:
    """None when the existing file at `path` is a snapshot of the run `args` describe (the
    command that remakes it: replacing it is the point); else why it must not be replaced."""
    from deffcore.views.sharing import SnapshotError, open_snapshot

    try:
        spec = open_snapshot(path).spec
    except SnapshotError:
        return "is not a run snapshot"
    asked = {k: getattr(args, k, None) for k in _SAME_RUN}
    asked["passages"] = asked["passages"] or "documents"
    asked["bos"] = asked["bos"] or "default"
    asked.update(intervention=getattr(args, "intervention", None) or "none")
    differs = [k for k, v in asked.items() if spec.get(k) != v]
    if differs:
        return f"is the snapshot of another run (it differs in {', '.join(differs)})"
    return None


def add_run_args(p: argparse.ArgumentParser, *, model: str, n: int, passages: bool = True) -> None:
    """--model/--revision/--dataset/--n/--max-tokens/--seed/--metric/--device/--dtype, and
    --passages/--bos unless `passages` is False (a command that tokenises on its own)."""
    p.add_argument(
        "--model",
        default=model,
        help="smollm2-135m, gemma3-270m, tiny-<arch>, random:<model>:<seed>, a Hugging Face "
        f"id, a local folder or .gguf file (default: {model})",
    )
    p.add_argument("--revision", default=None, help="hub revision (branch, tag, commit)")
    p.add_argument(
        "--dataset",
        default="bbc-news",
        help="bbc-news, hf:<name>[:<config>]:<split>[:<column>], or a local "
        ".txt/.jsonl/.csv/.parquet path[:column] (default: bbc-news)",
    )
    p.add_argument("--n", type=int, default=n, help=f"number of passages (default {n})")
    p.add_argument(
        "--max-tokens", type=int, default=128, help="tokens per passage, BOS counts (default 128)"
    )
    p.add_argument("--seed", type=int, default=0, help="passage sampling seed")
    if passages:
        add_passage_args(p)
    p.add_argument("--metric", choices=METRICS, default="cka")
    p.add_argument("--device", default=None, help="cpu, cuda (default: cuda if present)")
    p.add_argument(
        "--dtype",
        default=None,
        choices=("float32", "bfloat16", "float16"),
        help="forward dtype (default: bfloat16 on CUDA, float32 on CPU)",
    )


def add_passage_args(p: argparse.ArgumentParser) -> None:
    """--passages documents|windows|packed and --bos default|add|none."""
    p.add_argument(
        "--passages",
        choices=PASSAGE_MODES,
        default="documents",
        help="documents (each passage one document, truncated), windows (consecutive "
        "non-overlapping windows of --max-tokens tokens cut from each document, SPEC section "
        "12; reaches N = 10,000 on bbc-news) or packed (the same cut from all documents joined "
        "with a blank line, so a window may span two documents: more windows of long lengths)",
    )
    p.add_argument(
        "--bos",
        choices=BOS_OPTIONS,
        default="default",
        help="default (the tokenizer's choice), add (exactly one BOS) or none (no BOS)",
    )


def run_kwargs(args: argparse.Namespace) -> dict[str, object]:
    """The values `add_run_args` registered, as keyword arguments of `measure` and the labs."""
    names = (
        "model",
        "dataset",
        "n",
        "max_tokens",
        "seed",
        "metric",
        "revision",
        "device",
        "dtype",
        "passages",
        "bos",
    )
    return {name: getattr(args, name) for name in names if hasattr(args, name)}


def int_list(text: str, what: str) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError as err:
        raise DeffError(f"{what} must be comma-separated integers, got {text!r}.") from err


def float_list(text: str, what: str) -> tuple[float, ...]:
    try:
        return tuple(float(s) for s in text.split(",") if s.strip())
    except ValueError as err:
        raise DeffError(f"{what} must be comma-separated numbers, got {text!r}.") from err


def str_list(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(",") if s.strip())
