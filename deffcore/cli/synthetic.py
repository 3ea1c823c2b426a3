"""`python -m deffcore synthetic`: D_eff of a seeded synthetic construction (SPEC section 7).

python -m deffcore synthetic --construction independent --n 10000 --d 1024 --layers 32
python -m deffcore synthetic --construction orthogonal-updates --scale 0.5 --json
"""

from __future__ import annotations

import argparse
from typing import Any

from deffcore.cli._common import check_args
from deffcore.cli._output import print_json
from deffcore.core.constants import METRICS
from deffcore.measures.depth import depth_summary
from deffcore.measures.references import iid_reference_depth, update_depth
from deffcore.measures.similarity import cka_finite_sample_bias, similarity_matrix
from deffcore.measures.synthetic import CONSTRUCTIONS


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "synthetic",
        help="effective depth of a synthetic construction with known answer",
        description="Build a seeded synthetic stack of states and measure its effective depth.",
    )
    p.add_argument("--construction", choices=sorted(CONSTRUCTIONS), default="independent")
    p.add_argument("--n", type=int, default=1000, help="passages N (default 1000)")
    p.add_argument("--d", type=int, default=102, help="features d (default 102)")
    p.add_argument("--layers", type=int, default=32, help="layers L (default 32)")
    p.add_argument(
        "--scale", type=float, default=1.0, help="update scale s (orthogonal-updates only)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--metric", choices=METRICS, default="cka")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def measure_synthetic(
    construction: str, n: int, d: int, layers: int, scale: float, seed: int, metric: str
) -> dict[str, Any]:
    """Build the construction and return the CLI's JSON object (plain values)."""
    if construction == "orthogonal-updates":
        syn = CONSTRUCTIONS[construction](n, d, layers, scale=scale, seed=seed)
    else:
        syn = CONSTRUCTIONS[construction](n, d, layers, seed=seed)
    summary = depth_summary(similarity_matrix(syn.states, metric))
    out: dict[str, Any] = {
        "construction": construction,
        "n": n,
        "d": d,
        "layers": layers,
        "metric": metric,
        "seed": seed,
        "scale": scale if construction == "orthogonal-updates" else None,
        **summary.to_dict(),
        "iid_reference_deff_over_L": iid_reference_depth(n, d, layers) / layers,
        "cka_bias": cka_finite_sample_bias(n, d),
    }
    if syn.h0 is not None:
        upd = update_depth(syn.states_with_h0(), metric)
        out["deff_updates"] = upd.deff_upd
        out["deff_updates_over_L"] = upd.deff_upd_over_L
        out["rho1_updates"] = upd.rho1_upd
        out["update_to_state_norm"] = upd.update_to_state_norm
    return out


def run(args: argparse.Namespace) -> int:
    check_args(args, uses_cache=False)
    result = measure_synthetic(
        args.construction, args.n, args.d, args.layers, args.scale, args.seed, args.metric
    )
    if args.json:
        print_json(result)
        return 0
    title = f"{result['construction']}  N={args.n}  d={args.d}  L={args.layers}  "
    title += f"metric={args.metric}  seed={args.seed}"
    if result["scale"] is not None:
        title += f"  scale={args.scale:g}"
    rows = [
        ("D_eff", f"{result['deff']:.4f}"),
        ("D_eff/L", f"{result['deff_over_L']:.4f}"),
        ("rho_hat(1)", f"{result['rho1']:.4f}"),
        ("F_L = 2L/(L+1)", f"{result['reference_FL']:.4f}"),
        ("gap to F_L (%)", f"{result['gap_pct']:+.1f}"),
        ("iid reference D/L", f"{result['iid_reference_deff_over_L']:.4f}"),
        ("CKA bias d/(N+d)", f"{result['cka_bias']:.4f}"),
    ]
    rows += [(f"D_eff/L at K={k}", f"{v:.4f}") for k, v in result["deff_over_L_at_K"].items()]
    if "deff_updates_over_L" in result:
        rows += [
            ("D_eff(f)/L updates", f"{result['deff_updates_over_L']:.4f}"),
            ("rho_upd(1)", f"{result['rho1_updates']:.4f}"),
            ("||f||/||h||", f"{result['update_to_state_norm']:.4f}"),
        ]
    width = max(len(name) for name, _ in rows)
    print(title)
    for name, value in rows:
        print(f"  {name:<{width}}  {value:>10}")
    return 0
