"""`python -m deffcore bos`: BOS sensitivity of a run: controls, massive activations, sinks."""

from __future__ import annotations

import argparse

from deffcore.cli import _paired
from deffcore.cli._common import add_run_args, check_args, run_kwargs
from deffcore.cli._output import add_output_args, answer, fmt
from deffcore.core.constants import POOLINGS
from deffcore.statistics.bos_answer import answer_line, run_answer


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "bos",
        help="BOS and attention-sink check: pooling controls, massive activations, sink heads",
        description="Measure a run (cached) with every pooling control, then one small "
        "eager-attention pass over its first min(N, 64) passages for massive activations "
        "(per state h_0..h_L) and attention sinks (per block), and print one verdict. "
        "Compare --bos add with --bos none to tell a BOS sink from a first-position sink.",
    )
    add_run_args(p, model="smollm2-135m", n=512)
    p.add_argument("--batch-size", type=int, default=None, help="fixed batch size (default: auto)")
    p.add_argument(
        "--bootstrap",
        type=int,
        default=None,
        metavar="B",
        help="passage bootstrap with B replicates, one for the run: the default pooling's trust "
        "interval and the BOS answer's paired interval (default vs no_pos0, SPEC section 15)",
    )
    _paired.add_paired_args(p)
    add_output_args(p)
    p.set_defaults(func=run)


def compute(args: argparse.Namespace, progress=None) -> dict:
    """The run and its diagnostics, each cached; one model load serves both when needed."""
    from deffcore.extraction import cache
    from deffcore.lenses.bos_report import bos_report
    from deffcore.lenses.diagnostics_store import diagnose, read_diagnostics
    from deffcore.runs.measure import measure_spec, run_spec

    kw = run_kwargs(args)
    spec, device = run_spec(
        kw["model"],
        kw["dataset"],
        kw["n"],
        kw["max_tokens"],
        kw["seed"],
        kw["metric"],
        kw.get("revision"),
        kw.get("device"),
        kw.get("dtype"),
        passages=kw.get("passages", "documents"),
        bos=kw.get("bos", "default"),
    )
    if read_diagnostics(spec) is None or cache.load(spec) is None:
        # the dataset is checked first (fails fast); the model then loads once for both (the
        # diagnostics find the run's model in the process's cache, deffcore.inputs.model)
        from deffcore.inputs.texts import run_texts

        run_texts(spec)
    m = measure_spec(
        spec,
        metric=kw["metric"],
        device=device,
        batch_size=args.batch_size,
        progress=progress,
    )
    diag = diagnose(spec, device=device, progress=progress)
    pb = _paired.paired_of(m, args)  # one bootstrap: the trust interval and the answer's pairs
    held = pb is not None and pb.has("default", kw["metric"])
    boot = pb.result("default", kw["metric"]) if held else None
    report = bos_report(m, diag, kw["metric"], bootstrap=boot)
    report["position0_answer"] = run_answer(m.view(), kw["metric"]).to_dict()  # from `pb`
    return report


def _table(d: dict) -> str:
    from deffcore.cli.measure import trust_lines

    ratio = d["pos0_norm_ratio"]
    onset, sun = d["massive_onset"], d.get("sun_onset")
    lines = [
        f"model {d['model']}  layers L={d['layers']}  N={d['n']}  max_tokens={d['max_tokens']}  "
        f"passages={d['passages']}  bos={d['bos']} (tokenizer adds BOS: {d['adds_bos']})",
        "",
        answer_line(d["position0_answer"]["sentence"]),
        "",
        d["verdict"],
        "",
        f"{'pooling':<15}{'D_eff':>8}{'D_eff/L':>9}{'gap%':>8}{'rho1':>7}",
    ]
    for pooling in POOLINGS:
        r = d["results"][pooling]
        same = f"  = {r['identical_to']} (identical for this run)" if r.get("identical_to") else ""
        lines.append(
            f"{pooling:<15}{fmt(r['deff']):>8}{fmt(r['deff_over_L']):>9}"
            f"{fmt(r['gap_pct'], '.1f'):>8}{fmt(r['rho1']):>7}{same}"  # "—": undefined here
        )
    baseline = d.get("sink_baseline")
    lines += [
        "",
        *trust_lines(d["trust"]),
        "",
        f"position-0 norm ratio: peak {ratio['max']:.1f}x at layer {ratio['layer']}",
        f"massive activations ({d['diagnostic_passages']} passages): the project's ratio (mean "
        f"of the passages' largest |a| / median) > 100x "
        f"{'in no state' if onset is None else f'from layer {onset}'}; Sun et al. per "
        f"activation (|a| > 100 and >= 1,000x its state's median) "
        f"{'in no passage' if sun is None else f'from layer {sun}'} (column Sun: the share of "
        "passages with one)",
        f"sinks (ours): share of heads whose mean attention from queries >= 1 to position 0 "
        f"> 0.3, on the {d.get('sink_passages')} passages of >= {d.get('sink_min_length')} "
        f"tokens; uniform attention scores {'n/a' if baseline is None else f'{baseline:.3f}'} "
        "there",
        *gu_lines(d),
        f"{'layer':>6}{'ratio':>12}{'Sun':>6}{'position':>10}{'dim':>6}{'pos-0 ratio':>13}"
        f"{'sinks':>8}{'Gu':>6}",
    ]
    share = d.get("sun_share") or [None] * len(d["massive_ratio"])
    gu = d.get("gu_sink_fraction")
    for layer, r in enumerate(d["massive_ratio"]):
        frac = None if layer == 0 else d["sink_fraction"][layer - 1]
        sink = "" if layer == 0 else ("     n/a" if frac is None else f"{100 * frac:>7.0f}%")
        g = None if layer == 0 or gu is None else gu[layer - 1]
        gu_cell = "" if layer == 0 else ("   n/a" if g is None else f"{100 * g:>5.0f}%")
        lines.append(
            f"{layer:>6}{r:>12.1f}{'' if share[layer] is None else f'{100 * share[layer]:.0f}%':>6}"
            f"{d['massive_position'][layer]:>10}{d['massive_dim'][layer]:>6}"
            f"{ratio['per_layer'][layer]:>12.1f}x{sink}{gu_cell}"
        )
    return "\n".join(lines)


def gu_lines(d: dict) -> list[str]:
    """Gu et al.'s metric in words: whole passages and their first 64 tokens."""
    if d.get("gu_sink_metric") is None:
        return [
            f"sinks (Gu et al.): not computed (no passage of >= {d.get('gu_min_length')} tokens)"
        ]
    first = d.get("gu64_sink_metric")
    return [
        f"sinks (Gu et al.: query 0 included, > {d['gu_threshold']} decided per passage, block "
        f"and head, then averaged; column Gu): {100 * d['gu_sink_metric']:.1f}% of heads over "
        f"all blocks on the {d['gu_passages']} passages of >= {d['gu_min_length']} tokens, "
        f"{'n/a' if first is None else f'{100 * first:.1f}%'} on their first 64 tokens (Gu et "
        f"al.'s length); uniform attention scores {d['gu_baseline']:.3f}"
    ]


def run(args: argparse.Namespace) -> int:
    from deffcore.statistics.bootstrap import check_b

    if args.bootstrap is not None:  # bounded (and against memory) before anything is drawn
        check_b(args.bootstrap, "--bootstrap", n=args.n)
    _paired.check_paired_args(args)
    check_args(args)  # every argument, cheaply, before anything loads
    return answer(args, "passage", lambda bar: compute(args, progress=bar), _table)
