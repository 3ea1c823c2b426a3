"""A small mutation run: does each test catch the change it guards? (issue 27, item 7)

Each mutation replaces one exact snippet of the code (it must occur exactly once), runs the
tests named beside it, and restores the file. A mutation is *killed* when those tests fail,
*survives* when they pass; the kill rate is killed / (killed + survived). Run it on a copy of
the tree, never on the one you edit (the files are changed while it runs):

    git archive HEAD | tar -x -C /tmp/mut && ln -s $PWD/.venv /tmp/mut/.venv
    cd /tmp/mut && nice -n 10 .venv/bin/python scripts/mutation_run.py --out /tmp/mut.json

`--only WORD` runs the mutations whose name contains WORD. The list covers the modules issue
27 touched: the snapshot schema, shared runs, text escaping, output files, bounds, the
in-memory checks, the pages' isolation, and the guards whose mutations survived before.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCHEMA = "tests/test_run_schema.py"
SHARING = "tests/test_sharing.py"
OUTPUTS = "tests/test_outputs.py"
BOUNDS = "tests/test_bounds.py"
SAFE = "tests/test_safe_text.py"
HOSTILE = "tests/app/test_hostile_labels.py"
ISOLATION = "tests/app/test_runs_isolation.py"

#: (name, file, old snippet, new snippet, pytest arguments)
MUTATIONS: list[tuple[str, str, str, str, str]] = [
    # --- the schema of a snapshot (deffcore/views/run_schema.py)
    ("schema: no surrogate check", "deffcore/views/run_schema.py",
     "    if _BAD_TEXT.search(text):", "    if False:", SCHEMA),
    ("schema: surrogates allowed", "deffcore/views/run_schema.py",
     "\\u2066-\\u2069\\ud800-\\udfff]\")", "\\u2066-\\u2069]\")", SCHEMA),
    ("schema: no text length bound", "deffcore/views/run_schema.py",
     "    if len(text) > MAX_TEXT:", "    if False:", SCHEMA),
    ("schema: no depth bound", "deffcore/views/run_schema.py",
     "        if len(path) > MAX_DEPTH:", "        if False:", SCHEMA),
    ("schema: keys not checked", "deffcore/views/run_schema.py",
     "                _check_string(str(key), (*path, \"(key)\"), where)\n", "", SCHEMA),
    ("schema: bools are numbers", "deffcore/views/run_schema.py",
     "    if isinstance(value, bool) or not isinstance(value, int | float):",
     "    if not isinstance(value, int | float):", SCHEMA),
    ("schema: strings are numbers", "deffcore/views/run_schema.py",
     "    if isinstance(value, bool) or not isinstance(value, int | float):",
     "    if isinstance(value, bool):", SCHEMA),
    ("schema: infinities are numbers", "deffcore/views/run_schema.py",
     "    if isinstance(value, float) and not math.isfinite(value):",
     "    if False:", SCHEMA),
    ("schema: N bound 10^19", "deffcore/views/run_schema.py",
     "MAX_PASSAGES = 10**9", "MAX_PASSAGES = 10**19", SCHEMA),
    ("schema: d bound 10^400", "deffcore/views/run_schema.py",
     "MAX_D_MODEL = 2**20", "MAX_D_MODEL = 10**400", SCHEMA),
    ("schema: L bound off by one", "deffcore/views/run_schema.py",
     "MAX_LAYERS = 2048", "MAX_LAYERS = 2049", SCHEMA),
    ("schema: values beyond 1 allowed", "deffcore/views/run_schema.py",
     "    if np.abs(S).max() > 1 + 1e-6:", "    if np.abs(S).max() > 2:", SCHEMA),
    ("schema: symmetry loose", "deffcore/views/run_schema.py",
     "_SYMMETRY_TOL = 1e-6", "_SYMMETRY_TOL = 1e-1", SCHEMA),
    ("schema: diagonal unchecked", "deffcore/views/run_schema.py",
     "_DIAGONAL_TOL = 1e-4", "_DIAGONAL_TOL = 2.0", SCHEMA),
    ("schema: diagonal loose", "deffcore/views/run_schema.py",
     "_DIAGONAL_TOL = 1e-4", "_DIAGONAL_TOL = 1e-2", SCHEMA),
    ("schema: ratios count", "deffcore/views/run_schema.py",
     "        if len(self.pos0_norm_ratio) != L + 1:",
     "        if len(self.pos0_norm_ratio) < 2:", SCHEMA),
    ("schema: all-null ratios", "deffcore/views/run_schema.py",
     "        if all(r is None for r in self.pos0_norm_ratio):", "        if False:", SCHEMA),
    ("schema: matrix size vs L", "deffcore/views/run_schema.py",
     "                if len(S) != L:", "                if False:", SCHEMA),
    ("schema: n beyond the spec", "deffcore/views/run_schema.py",
     "        if self.n > self.spec.n:", "        if False:", SCHEMA),
    ("schema: CLI JSON sizes", "deffcore/views/run_schema.py",
     "            if getattr(m, name) is not None and getattr(m, name) != getattr(self, name):",
     "            if False:", SCHEMA),
    ("schema: CLI JSON key", "deffcore/views/run_schema.py",
     "        if m.key and self.key and m.key != self.key:", "        if False:", SCHEMA),
    ("schema: bias d/(N+d)", "deffcore/views/run_schema.py",
     "        bias = self.d_model / (self.n + self.d_model)",
     "        bias = self.d_model / self.n", SCHEMA),
    ("schema: stored D_eff vs matrix", "deffcore/views/run_schema.py",
     "            if computed and not _agree(", "            if False and not _agree(", SCHEMA),
    ("schema: agreement loose", "deffcore/views/run_schema.py",
     "_AGREE_REL = 1e-3", "_AGREE_REL = 0.5", SCHEMA),
    ("schema: rho_upd length", "deffcore/views/run_schema.py",
     "len(upd.rho_upd) != self.layers - 1:", "len(upd.rho_upd) < 1:", SCHEMA),
    ("schema: band seeds vs values", "deffcore/views/run_schema.py",
     "        if len(self.seeds) != len(self.deff_over_L):", "        if False:", SCHEMA),
    ("schema: band mean inside", "deffcore/views/run_schema.py",
     "        if not self.low <= self.mean <= self.high:", "        if False:", SCHEMA),
    ("schema: band mean of seeds", "deffcore/views/run_schema.py",
     "1e-4 + 1e-3 * abs(self.mean):", "1.0:", SCHEMA),
    ("schema: spec fields open", "deffcore/views/run_schema.py",
     'model_config = ConfigDict(extra="forbid")', 'model_config = ConfigDict(extra="allow")',
     SCHEMA),
    ("schema: F_L optional", "deffcore/views/run_schema.py",
     "    F_L: Number\n", "    F_L: Number | None = None\n", SCHEMA),
    ("schema: band values optional", "deffcore/views/run_schema.py",
     "    deff_over_L: list[Number] = Field(min_length=1, max_length=MAX_SEEDS)",
     "    deff_over_L: list[Number] = []", SCHEMA),
    ("schema: views skip the schema", "deffcore/views/snapshot.py",
     "        self.data = check_snapshot(data, where)", "        self.data = data", SCHEMA),
    # --- shared runs (deffcore/views/sharing.py, deffcore/cli/runs.py)
    ("sharing: size bound off by one", "deffcore/views/sharing.py",
     "    if len(data) > MAX_SNAPSHOT_BYTES:", "    if len(data) >= MAX_SNAPSHOT_BYTES:", SHARING),
    ("sharing: size bound 32 MiB", "deffcore/views/sharing.py",
     "MAX_SNAPSHOT_BYTES = 16 * 1024 * 1024", "MAX_SNAPSHOT_BYTES = 32 * 1024 * 1024", SHARING),
    ("sharing: file size unchecked", "deffcore/views/sharing.py",
     "            if info.st_size > MAX_SNAPSHOT_BYTES:", "            if False:", SHARING),
    ("sharing: linked .shared listed", "deffcore/views/sharing.py",
     "    folder = shared_dir()\n    if folder.is_symlink() or not folder.is_dir():\n"
     "        return []",
     "    folder = shared_dir()\n    if not folder.is_dir():\n        return []", SHARING),
    ("sharing: linked .shared saved into", "deffcore/views/sharing.py",
     "    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):",
     "    if folder.exists() and not folder.is_dir():", SHARING),
    ("sharing: linked .shared deleted in", "deffcore/views/sharing.py",
     "    if not is_real_dir(path.parent) or not is_regular(path):",
     "    if not is_regular(path):", SHARING),
    ("sharing: a kept link is ours", "deffcore/views/sharing.py",
     "    if not is_real_dir(path.parent) or not is_regular(path):",
     "    if not is_real_dir(path.parent) or not path.is_file():", SHARING),
    ("sharing: changed file deletable", "deffcore/views/sharing.py",
     "    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] == path.name[:16]",
     "    return True", SHARING),
    ("sharing: damaged entry dropped", "deffcore/views/sharing.py",
     "        entries.append(SharedEntry(prefix, path, view, error, _is_shared_file(path)))",
     "        if view is not None:\n"
     "            entries.append(SharedEntry(prefix, path, view, error, _is_shared_file(path)))",
     SHARING),
    ("runs command: shared not listed", "deffcore/cli/runs.py",
     "    shared = shared_rows()\n", "    shared = []\n", SHARING),
    ("runs command: shared not deleted", "deffcore/cli/runs.py",
     "        if shared is not None:", "        if False:", SHARING),
    ("runs command: control chars shown", "deffcore/cli/runs.py",
     '    text = "".join(c if c.isprintable() else "?" for c in str(value))',
     "    text = str(value)", SHARING),
    # --- text is text (deffcore/core/safe_text.py, figures, explorer)
    ("safe_text: surrogates kept", "deffcore/core/safe_text.py",
     "\\u2066-\\u2069\\ud800-\\udfff]\")", "\\u2066-\\u2069]\")", SAFE),
    ("safe_text: % not escaped", "deffcore/core/safe_text.py",
     '.replace("%", "&#37;")', "", SAFE),
    ("safe_text: no formula prefix", "deffcore/core/safe_text.py",
     '        return "\'" + value', "        return value", SAFE),
    ("safe_text: no @ formula", "deffcore/core/safe_text.py",
     'CSV_FORMULA_STARTS = ("=", "+", "-", "@", "\\t", "\\r")',
     'CSV_FORMULA_STARTS = ("=", "+", "-", "\\t", "\\r")', SAFE),
    ("safe_text: headers not neutralised", "deffcore/core/safe_text.py",
     "    out.columns = [csv_cell(c) for c in out.columns]\n", "", SAFE),
    ("figures: csv not neutralised", "deffcore/figures/base.py",
     "    csv_safe(data).to_csv(buffer, index=False)", "    data.to_csv(buffer, index=False)",
     SAFE),
    ("figures: customdata raw", "deffcore/figures/base.py",
     "            trace.customdata = _escaped_cells(custom)", "            pass", SAFE),
    ("figures: model hover raw", "deffcore/figures/models.py",
     '    text = f"{plotly_text(name)}<br>', '    text = f"{name}<br>', f"{HOSTILE} -k Models"),
    ("figures: compare template raw", "deffcore/figures/compare.py",
     'hovertemplate=f"{plotly_text(name)}<br>k = ', 'hovertemplate=f"{name}<br>k = ',
     f"{HOSTILE} -k Runs"),
    ("guard: what unescaped", "explorer/guard.py",
     "    shown = md_escape(what)", "    shown = what", f"{HOSTILE} -k error_naming"),
    ("runs page: no per-row isolation", "pages/7_Runs.py",
     "    rows = [safe_row(e, runs) for e in runs.entries]",
     "    rows = [table_row(e, runs) for e in runs.entries]", ISOLATION),
    ("runs page: sections not isolated", "pages/7_Runs.py",
     "        with guarded(what):\n            section()", "        section()", ISOLATION),
    ("runs page: damaged not deletable", "explorer/shared_runs.py",
     '"deletable": kept.deletable,', '"deletable": False,', ISOLATION),
    # --- outputs (deffcore/core/checks.py, commands)
    ("outputs: input allowed", "deffcore/core/checks.py",
     "        if source is not None and _same_file(path, source):", "        if False:", OUTPUTS),
    ("outputs: hard links not same", "deffcore/core/checks.py",
     "        if output.exists() and os.path.samefile(output, source):", "        if False:",
     OUTPUTS),
    ("outputs: links written through", "deffcore/core/checks.py",
     "    if path.is_symlink():\n        raise InvalidArgumentError(",
     "    if False:\n        raise InvalidArgumentError(", OUTPUTS),
    ("outputs: any file replaced", "deffcore/core/checks.py",
     "        if why is not None:\n            raise InvalidArgumentError(\n"
     '                f"{name} {path} already exists',
     "        if False:\n            raise InvalidArgumentError(\n"
     '                f"{name} {path} already exists', OUTPUTS),
    ("outputs: another run replaced", "deffcore/cli/_common.py",
     "    if differs:\n", "    if False:\n", OUTPUTS),
    ("outputs: column spec not an input", "deffcore/core/checks.py",
     "    for candidate in (text, text.rpartition(\":\")[0]):",
     "    for candidate in (text,):", OUTPUTS),
    ("outputs: write not atomic", "deffcore/core/files.py",
     "        os.replace(tmp, path)\n    except BaseException:\n        with contextlib.suppress("
     "OSError):\n            os.unlink(tmp)\n        raise\n",
     "        os.replace(tmp, path)\n    except BaseException:\n        raise\n", OUTPUTS),
    ("outputs: OSError a traceback", "deffcore/core/checks.py",
     "    except OSError as err:\n        advice = {", "    except ZeroDivisionError as err:\n"
     "        advice = {", OUTPUTS),
    ("cache_files: rewrite drops old", "deffcore/core/files.py",
     "    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f\".{path.name}.\", suffix=\".tmp\")",
     "    path.unlink(missing_ok=True)\n"
     "    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f\".{path.name}.\", suffix=\".tmp\")",
     "tests/test_cache_safety.py -k failed_rewrite"),
    # --- bounds (planner, model_size, checks.csv_rows)
    ("bounds: inf bytes", "deffcore/runs/planner.py",
     "    if not 1 <= value <= MAX_BYTES:", "    if not 1 <= value:", BOUNDS),
    ("bounds: 0.5 bytes", "deffcore/runs/planner.py",
     "    if not 1 <= value <= MAX_BYTES:", "    if not 0 < value <= MAX_BYTES:", BOUNDS),
    ("bounds: model size unchecked", "deffcore/inputs/model_size.py",
     "            if isinstance(value, bool) or not isinstance(value, int) or not low <= value "
     "<= high:", "            if False:", BOUNDS),
    ("bounds: bools are sizes", "deffcore/inputs/model_size.py",
     "            if isinstance(value, bool) or not isinstance(value, int) or not low <= value "
     "<= high:", "            if not isinstance(value, int) or not low <= value <= high:", BOUNDS),
    ("bounds: zero heads divide", "deffcore/inputs/model_size.py",
     "    return d // heads if heads > 0 else 0", "    return d // heads", BOUNDS),
    ("bounds: kv above heads", "deffcore/inputs/model_size.py",
     "        if self.kv_heads > self.heads:", "        if False:", BOUNDS),
    ("bounds: csv field unbounded", "deffcore/core/checks.py",
     "            if longest > max_field:", "            if False:", BOUNDS),
    ("bounds: csv error a traceback", "deffcore/core/checks.py",
     "    except csv.Error as err:", "    except ZeroDivisionError as err:", BOUNDS),
    ("bounds: scores not through csv_rows", "deffcore/labs/scores.py",
     '    rows = csv_rows(_read_text(path), f"The scores file {path.name}")',
     "    import csv, io\n    rows = list(csv.reader(io.StringIO(_read_text(path))))", BOUNDS),
    # --- the in-memory model (deffcore/runs/external.py) and named arguments
    ("external: meta weights", "deffcore/runs/external.py",
     "    if on_meta is not None:", "    if False:",
     "tests/test_external.py -k checked_like"),
    ("external: positions", "deffcore/runs/external.py",
     "    if limit is not None and max_tokens > limit:", "    if False:",
     "tests/test_external.py -k checked_like"),
    ("external: positions off by one", "deffcore/runs/external.py",
     "    if limit is not None and max_tokens > limit:",
     "    if limit is not None and max_tokens >= limit:", "tests/test_external.py -k checked_like"),
    ("external: token ids", "deffcore/runs/external.py",
     "        if seq and not 0 <= min(seq) <= max(seq) < rows:", "        if False:",
     "tests/test_external.py -k checked_like"),
    ("headline: K not checked", "deffcore/views/run_view.py",
     'min(check_int(K, "K", 1), L - 1)', "min(int(K), L - 1)",
     "tests/test_external.py -k names_its"),
    ("figure: options not checked", "deffcore/views/notebook.py",
     "    unknown = [k for k in options if k not in FIGURE_OPTIONS]", "    unknown = []",
     "tests/test_external.py -k names_its"),
    ("notebook: heatmap unbounded", "deffcore/views/notebook.py",
     "MAX_CELLS = 64", "MAX_CELLS = 4096", "tests/test_notebook.py -k bounded"),
    ("notebook: block means wrong", "deffcore/views/notebook.py",
     "        S = np.array([[S[np.ix_(a, b)].mean() for b in blocks] for a in blocks])",
     "        S = np.array([[S[a[0], b[0]] for b in blocks] for a in blocks])",
     "tests/test_notebook.py -k bounded"),
    # --- the guards whose mutations survived before
    ("serving: containment by prefix", "deffcore/inputs/serving.py",
     "    if resolved != policy.folder and policy.folder not in resolved.parents:",
     "    if not str(resolved).startswith(str(policy.folder)):",
     "tests/test_serving.py -k sibling"),
    ("planner: similarity never refused", "deffcore/runs/planner.py",
     "            if need > plan.limit:",
     '            if need > plan.limit and step == "extraction":',
     "tests/test_planner.py -k own_memory"),
    ("planner: bootstrap unplanned", "deffcore/runs/planner.py",
     '        out["bootstrap"] = bootstrap_bytes(size, n, bootstrap)', "        pass",
     "tests/test_planner.py -k own_memory"),
    ("planner: bootstrap terms dropped", "deffcore/runs/planner.py",
     " + work + 2 * B * L * n * 8", " + work", "tests/test_planner.py -k replicates"),
    ("planner: disk needs once", "deffcore/runs/planner.py",
     "and 2 * plan.disk > plan.disk_free:", "and plan.disk > plan.disk_free:",
     "tests/test_planner.py -k twice_the_entry"),
    ("planner: disk unchecked", "deffcore/runs/planner.py",
     "    if plan.disk is not None and plan.disk_free is not None and 2 * plan.disk",
     "    if False and plan.disk is not None and plan.disk_free is not None and 2 * plan.disk",
     "tests/test_planner.py -k twice_the_entry"),
    ("bootstrap: replicates at K = L-1", "deffcore/statistics/bootstrap.py",
     "    samples = np.array([effective_depth(s, K) / n_layers for s in mats])",
     "    samples = np.array([effective_depth(s) / n_layers for s in mats])",
     "tests/test_bootstrap.py -k result_fields"),
    ("prefix: n not a whole batch", "deffcore/extraction/prefix.py",
     "    if spec.n % batch:\n        return None\n", "",
     "tests/test_prefix.py -k other_batching"),
    ("prefix: other batching", "deffcore/extraction/prefix.py",
     '        em.get("batch_rows") == batch\n', "        True\n",
     "tests/test_prefix.py -k other_batching"),
    ("trust: band scale doubled", "deffcore/statistics/trust_rule.py",
     "    band = 100.0 * error * point * (layers + 1) / 2", "    band = 100.0 * error * point * "
     "(layers + 1)", "tests/test_trust.py -k regime_inside"),
    ("trust: band scale without L", "deffcore/statistics/trust_rule.py",
     "    band = 100.0 * error * point * (layers + 1) / 2", "    band = 100.0 * error * point",
     "tests/test_trust.py -k regime_inside"),
    ("trust: spread constant", "deffcore/statistics/trust_rule.py",
     "\nSPREAD_C = 1.5\n", "\nSPREAD_C = 1.4\n", "tests/test_trust.py -k two_percent"),
    ("trust: solid edge", "deffcore/statistics/trust_rule.py",
     "SOLID_ERROR = 0.02", "SOLID_ERROR = 0.021", "tests/test_trust.py -k two_percent"),
    ("model_files: nested auto_map", "deffcore/inputs/model_files.py",
     "    for sub in config.values():\n        if isinstance(sub, dict) and (found := "
     "_auto_map(sub)):\n            return found\n", "",
     "tests/test_model_files.py -k nested"),
    ("model_files: a missing block allowed", "deffcore/inputs/model_files.py",
     'if id(params[k]) in embed_ids or any(part.isdigit() for part in k.split("."))',
     "if id(params[k]) in embed_ids", "tests/test_model_folders.py -k more_blocks"),
    ("model_config: no refusal by design", "deffcore/inputs/model_config.py",
     '    if model_type in BY_DESIGN:\n        return BY_DESIGN[model_type]\n', "",
     "tests/test_model_folders.py -k encoder"),
    ("devices: folders not sized", "deffcore/inputs/devices.py",
     "        params, advice = parameters(config),", "        return\n        params, advice = "
     "parameters(config),", "tests/test_model_folders.py -k larger_than"),
    ("gguf: arrays of any depth", "deffcore/inputs/gguf.py",
     "            if depth >= MAX_ARRAY_DEPTH:", "            if False:",
     "tests/test_gguf_reading.py -k hostile"),
    ("correlation: exact p below 9", "deffcore/measures/correlation.py",
     "    exact = spearman_exact_p(x, y) if n <= EXACT_MAX_N else None",
     "    exact = spearman_exact_p(x, y) if n < EXACT_MAX_N else None",
     "tests/test_correlation.py -k boundary"),
    ("correlation: exact up to 8", "deffcore/measures/correlation.py",
     "EXACT_MAX_N = 9", "EXACT_MAX_N = 8", "tests/test_correlation.py -k boundary"),
]  # fmt: skip


def run_one(name: str, file: str, old: str, new: str, tests: str, timeout: int) -> dict:
    path = ROOT / file
    source = path.read_text()
    count = source.count(old)
    if count != 1:
        return {"name": name, "file": file, "result": f"stale ({count} matches)"}
    start = time.time()
    try:
        path.write_text(source.replace(old, new))
        cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests.split()]
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
            result = "survived" if proc.returncode == 0 else "killed"
            if proc.returncode not in (0, 1):  # 2+: the tests could not even be collected
                result = "killed (error)"
        except subprocess.TimeoutExpired:
            result = "killed (timeout)"
    finally:
        path.write_text(source)
    return {"name": name, "file": file, "tests": tests, "result": result,
            "seconds": round(time.time() - start, 1)}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run mutations whose name contains this")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per mutation")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if args.only in m[0]]
    results = []
    for mutation in chosen:
        results.append(run_one(*mutation, timeout=args.timeout))
        r = results[-1]
        print(f"{r['result']:<18} {r.get('seconds', 0):>7.1f}s  {r['name']}", flush=True)
        if args.out is not None:
            args.out.write_text(json.dumps(results, indent=1))
    killed = sum(r["result"].startswith("killed") for r in results)
    survived = sum(r["result"] == "survived" for r in results)
    stale = len(results) - killed - survived
    rate = killed / max(1, killed + survived)
    print(f"killed {killed}, survived {survived}, stale {stale}: kill rate {rate:.1%}")
    return 0 if stale == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
