"""A small mutation run: does each test catch the change it guards?

Each mutation replaces one exact snippet of the code (it must occur exactly once), runs the
tests named beside it, and restores the file. A mutation is *killed* when those tests fail,
*survives* when they pass; the kill rate is killed / (killed + survived). Run it on a copy of
the tree, never on the one you edit (the files are changed while it runs):

    git archive HEAD | tar -x -C /tmp/mut && ln -s $PWD/.venv /tmp/mut/.venv
    cd /tmp/mut && nice -n 10 .venv/bin/python scripts/mutation_run.py --out /tmp/mut.json

`--only WORD` runs the mutations whose name contains WORD. The list covers the modules of
the input hardening: the snapshot schema, shared runs, text escaping, output files, bounds, the
in-memory checks, the pages' isolation, and the guards whose mutations survived before.
"""

from __future__ import annotations

import argparse
import json
import shlex
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
LOADED = "tests/test_loaded_models.py"
GENERIC = "tests/test_generic_adapter.py tests/test_architecture.py"
ATLAS = "tests/test_atlas_summary.py tests/test_atlas.py tests/test_atlas_skip.py"
ATLAS_SKIP = "tests/test_atlas_skip.py"
REPORT = "tests/test_run_report_text.py tests/test_run_report.py"
#: the calibration tests of test_bos_answer.py take minutes on a 2-core machine: left out
FAST_BOS = "tests/test_bos_answer.py -k 'not calibrated_on'"
PAIRED = f"tests/test_paired_difference.py {FAST_BOS}"
POS0 = f"tests/test_position0.py {FAST_BOS}"
ANYTIME = "tests/test_anytime_paired.py"
GW = "tests/test_gw.py"
MODEL_CONFIG = "tests/test_model_folders.py"
ANSWER = f"tests/test_anytime_paired.py {FAST_BOS}"

#: (name, file, old snippet, new snippet, pytest arguments)
MUTATIONS: list[tuple[str, str, str, str, str]] = [
    # --- the schema of a snapshot (deffcore/views/run_schema.py)
    ("schema: no surrogate check", "deffcore/views/run_schema.py",
     "    if NOT_TEXT.search(text):", "    if False:", SCHEMA),
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
    ("schema: views skip the schema", "deffcore/views/run.py",
     "        data = check_snapshot(data, where)", "        data = dict(data)", SCHEMA),
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
    # --- outputs (deffcore/core/files.py, commands)
    ("outputs: input allowed", "deffcore/core/files.py",
     "        if source is not None and _same_file(path, source):", "        if False:", OUTPUTS),
    ("outputs: hard links not same", "deffcore/core/files.py",
     "        if output.exists() and os.path.samefile(output, source):", "        if False:",
     OUTPUTS),
    ("outputs: links written through", "deffcore/core/files.py",
     "    if stat.S_ISLNK(mode):\n        return InvalidArgumentError(",
     "    if False:\n        return InvalidArgumentError(", OUTPUTS),
    ("outputs: FIFO replaced", "deffcore/core/files.py",
     "    if mode is None or stat.S_ISREG(mode):", "    if mode is None or not stat.S_ISLNK(mode):",
     OUTPUTS),
    ("outputs: any file ours", "deffcore/core/files.py",
     "    return any(m.match(head) for m in marks)", "    return True", OUTPUTS),
    ("outputs: package data writable", "deffcore/core/files.py",
     "    if _inside(target, PACKAGE_DIR.resolve()):", "    if False:", OUTPUTS),
    ("outputs: write does not look again", "deffcore/core/files.py",
     "    refusal = _kind_refusal(path, name)\n    if refusal is not None:\n        raise refusal\n"
     "    try:", "    try:", OUTPUTS),
    ("outputs: any file replaced", "deffcore/core/files.py",
     "        if why is not None:\n            raise InvalidArgumentError(\n"
     '                f"{name} {path} already exists',
     "        if False:\n            raise InvalidArgumentError(\n"
     '                f"{name} {path} already exists', OUTPUTS),
    ("outputs: another run replaced", "deffcore/cli/_common.py",
     "    if differs:\n", "    if False:\n", OUTPUTS),
    ("outputs: column spec not an input", "deffcore/core/files.py",
     "    for candidate in (text, text.rpartition(\":\")[0]):",
     "    for candidate in (text,):", OUTPUTS),
    ("outputs: write not atomic", "deffcore/core/files.py",
     "        os.replace(tmp, path)\n    except BaseException:\n        with contextlib.suppress("
     "OSError):\n            os.unlink(tmp)\n        raise\n",
     "        os.replace(tmp, path)\n    except BaseException:\n        raise\n", OUTPUTS),
    ("outputs: OSError a traceback", "deffcore/core/files.py",
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
    ("bounds: model size unchecked", "deffcore/inputs/model.py",
     "            if isinstance(value, bool) or not isinstance(value, int) or not low <= value "
     "<= high:", "            if False:", BOUNDS),
    ("bounds: bools are sizes", "deffcore/inputs/model.py",
     "            if isinstance(value, bool) or not isinstance(value, int) or not low <= value "
     "<= high:", "            if not isinstance(value, int) or not low <= value <= high:", BOUNDS),
    ("bounds: zero heads divide", "deffcore/inputs/model.py",
     "    return d // heads if heads > 0 else 0", "    return d // heads", BOUNDS),
    ("bounds: kv above heads", "deffcore/inputs/model.py",
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
    ("headline: K not checked", "deffcore/views/run.py",
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
    ("prefix: n not a whole batch", "deffcore/extraction/cache.py",
     "    if spec.n % batch:\n        return None\n", "",
     "tests/test_prefix_cache.py -k other_batching"),
    ("prefix: other batching", "deffcore/extraction/cache.py",
     '        em.get("batch_rows") == batch\n', "        True\n",
     "tests/test_prefix_cache.py -k other_batching"),
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
    ("model_files: nested auto_map", "deffcore/inputs/model.py",
     "    for sub in config.values():\n        if isinstance(sub, dict) and (found := "
     "_auto_map(sub)):\n            return found\n", "",
     "tests/test_model_files.py -k nested"),
    ("model_files: a missing block allowed", "deffcore/inputs/model.py",
     'if id(params[k]) in embed_ids or any(part.isdigit() for part in k.split("."))',
     "if id(params[k]) in embed_ids", "tests/test_model_folders.py -k more_blocks"),
    ("model_config: no refusal by design", "deffcore/inputs/model.py",
     '    if model_type in BY_DESIGN:\n        return BY_DESIGN[model_type]\n', "",
     "tests/test_model_folders.py -k encoder"),
    ("devices: folders not sized", "deffcore/inputs/model.py",
     "        params, advice = parameters(config),", "        return\n        params, advice = "
     "parameters(config),", "tests/test_model_folders.py -k larger_than"),
    ("gguf: arrays of any depth", "deffcore/inputs/model.py",
     "            if depth >= MAX_ARRAY_DEPTH:", "            if False:",
     "tests/test_gguf_reading.py -k hostile"),
    ("correlation: exact p below 9", "deffcore/measures/correlation.py",
     "    exact = spearman_exact_p(x, y) if n <= EXACT_MAX_N else None",
     "    exact = spearman_exact_p(x, y) if n < EXACT_MAX_N else None",
     "tests/test_correlation.py -k boundary"),
    ("correlation: exact up to 8", "deffcore/measures/correlation.py",
     "EXACT_MAX_N = 9", "EXACT_MAX_N = 8", "tests/test_correlation.py -k boundary"),
    # --- reliability round 4 (BENCHMARKS.md "the mutation run of reliability round 4"): one
    # section per module, the fast hand-made tests first (-x stops at the first failure); the
    # names start "r4 " (`--only "r4 "`). Mutants found equivalent are comments, not entries,
    # each with its reason (the 5 "EQUIVALENT" lines below); they are not counted.
    # -- the loaded-model cache (deffcore/inputs/model.py)
    ("r4 loaded_models: key without the weights id", "deffcore/inputs/model.py",
     'key = (spec, revision, model_identity(spec, revision)["weights_id"], device, dtype)',
     "key = (spec, revision, None, device, dtype)", LOADED),
    ("r4 loaded_models: key without the device", "deffcore/inputs/model.py",
     'key = (spec, revision, model_identity(spec, revision)["weights_id"], device, dtype)',
     'key = (spec, revision, model_identity(spec, revision)["weights_id"], "cpu", dtype)',
     LOADED),
    ("r4 loaded_models: key without the dtype", "deffcore/inputs/model.py",
     'key = (spec, revision, model_identity(spec, revision)["weights_id"], device, dtype)',
     'key = (spec, revision, model_identity(spec, revision)["weights_id"], device, None)',
     LOADED),
    ("r4 loaded_models: stale weights kept", "deffcore/inputs/model.py",
     "                    if self._entries[k].users == 0:\n", "                    if False:\n",
     LOADED),
    ("r4 loaded_models: stale means any device", "deffcore/inputs/model.py",
     "k[:2] == key[:2] and k[3:] == key[3:]", "k[:2] == key[:2]", LOADED),
    ("r4 loaded_models: budget bound off by one", "deffcore/inputs/model.py",
     "used + need <= budget", "used + need < budget", LOADED),
    ("r4 loaded_models: leased model evicted", "deffcore/inputs/model.py",
     "                if e.users == 0:\n                    del self._entries[e.key]",
     "                if True:\n                    del self._entries[e.key]", LOADED),
    ("r4 loaded_models: most recent evicted first", "deffcore/inputs/model.py",
     "for e in sorted(mine, key=lambda e: e.last_used):",
     "for e in sorted(mine, key=lambda e: -e.last_used):", LOADED),
    ("r4 loaded_models: other devices evicted", "deffcore/inputs/model.py",
     "if k[3] == device and k != keep]", "if k != keep]", LOADED),
    # EQUIVALENT (r4 loaded_models: failed load kept, `if entry.loaded is None and
    # entry.users == 0:` -> `if False:`): the kept entry holds no model, so the next lease of the
    # key loads again exactly as a new entry would, held() lists loaded entries only, and the
    # next eviction on its device drops it; only the private dict holds it meanwhile.
    # -- the generic adapter (deffcore/inputs/architecture.py)
    ("r4 generic: BOS even when it is the EOS", "deffcore/inputs/architecture.py",
     "return isinstance(bos, int) and bos not in eos_ids", "return isinstance(bos, int)",
     GENERIC),
    ("r4 generic: zero is a layer count", "deffcore/inputs/architecture.py",
     "and value > 0:", "and value >= 0:", GENERIC),
    ("r4 generic: deepest block list", "deffcore/inputs/architecture.py",
     "return min(same, key=lambda item: (_depth(item[0]), not self._named(item[0])))[1]",
     "return max(same, key=lambda item: (_depth(item[0]), not self._named(item[0])))[1]",
     GENERIC),
    ("r4 generic: list output loses its tail", "deffcore/inputs/architecture.py",
     "            return [hidden, *output[1:]]", "            return hidden", GENERIC),
    ("r4 generic: a 1-wide conv is recurrent", "deffcore/inputs/architecture.py",
     "max(sub.kernel_size) > 1", "max(sub.kernel_size) >= 1", GENERIC),
    ("r4 generic: every block has attention", "deffcore/inputs/architecture.py",
     "            if any(isinstance(sub, recorded) for sub in block.modules())\n", "", GENERIC),
    # -- the depth-use atlas (deffcore/measures/atlas.py)
    ("r4 atlas: a 90% interval", "deffcore/measures/atlas.py",
     "    ci: float = 0.95,\n    budget: float = GROMOV_BUDGET,",
     "    ci: float = 0.90,\n    budget: float = GROMOV_BUDGET,", ATLAS),
    ("r4 atlas: one tail at (1-ci)", "deffcore/measures/atlas.py",
     "    tail = (1 - ci) / 2\n", "    tail = (1 - ci)\n", ATLAS),
    ("r4 atlas: integer interval rounded inwards", "deffcore/measures/atlas.py",
     "return np.floor(lo), np.ceil(hi)", "return np.ceil(lo), np.floor(hi)", ATLAS),
    ("r4 atlas: phase threshold a third", "deffcore/measures/atlas.py",
     "r[: first_half(len(r))])) / 2", "r[: first_half(len(r))])) / 3", ATLAS),
    ("r4 atlas: first half rounded up", "deffcore/measures/atlas.py",
     "return max(1, L // 2)", "return max(1, (L + 1) // 2)", ATLAS),
    ("r4 atlas: gromov takes the smallest n", "deffcore/measures/atlas.py",
     "n = int(ok[-1]) + 1", "n = int(ok[0]) + 1", ATLAS),
    ("r4 atlas: bi second half from one early", "deffcore/measures/atlas.py",
     "float(np.mean(bi[half:])) if half < L", "float(np.mean(bi[half - 1 :])) if half < L",
     ATLAS),
    ("r4 atlas: skip diagonal kept", "deffcore/measures/atlas.py",
     "upper = np.triu(np.ones((L, L), dtype=bool), k=1)",
     "upper = np.triu(np.ones((L, L), dtype=bool), k=0)", ATLAS),
    ("r4 atlas: later_max is a mean", "deffcore/measures/atlas.py",
     "np.nan_to_num(later_max, nan=0.0).max(0)", "np.nan_to_num(later_max, nan=0.0).mean(0)",
     ATLAS),
    ("r4 atlas: file's angular distance up to 2", "deffcore/measures/atlas.py",
     '"angular distance", 0, 1)', '"angular distance", 0, 2)', ATLAS),
    ("r4 atlas: file's phase point past L", "deffcore/measures/atlas.py",
     "not 0 <= p <= L:", "not 0 <= p <= L + 1:", ATLAS),
    ("r4 atlas: file's skip effect of other blocks", "deffcore/measures/atlas.py",
     'if not isinstance(skip, dict) or skip.get("layers") != L:',
     "if not isinstance(skip, dict):", ATLAS),
    # -- the skip effect (deffcore/lenses/atlas_skip.py)
    # EQUIVALENT (r4 atlas_skip: padding in the max, drop `rel = torch.where(keep, rel,
    # 0.0)`): the captured updates are zeroed at padding in both passes, so rel there is
    # 0 / EPS = 0 already, and the max of values >= 0 with some zeros added is unchanged.
    ("r4 atlas_skip: later_max is the mean", "deffcore/lenses/atlas_skip.py",
     "top[:, s, j] = rel.max(-1).values.double().cpu()",
     "top[:, s, j] = (rel.double() * w).sum(-1).cpu()", ATLAS_SKIP),
    ("r4 atlas_skip: the diagonal is measured", "deffcore/lenses/atlas_skip.py",
     "for j in range(s + 1, L):", "for j in range(s, L):", ATLAS_SKIP),
    ("r4 atlas_skip: KL reversed", "deffcore/lenses/atlas_skip.py",
     "per_t = (logp.exp() * (logp - logq)).sum(-1)",
     "per_t = (logq.exp() * (logq - logp)).sum(-1)", ATLAS_SKIP),
    # EQUIVALENT (r4 atlas_skip: KL of padding, drop the keep mask before the weights): w
    # is 0 at padding, so the mask only guards a NaN or infinite log-probability at a padded
    # position, which a right-padded causal batch (each row attends its own real tokens) never has.
    # -- the report (deffcore/views/run_report.py)
    ("r4 run_report: paragraph unescaped", "deffcore/views/run_report.py",
     'self.parts.append(f"<p{attr}>{html.escape(text)}</p>")',
     'self.parts.append(f"<p{attr}>{text}</p>")', REPORT),
    # EQUIVALENT (r4 run_report: heading unescaped, `<h2>{html.escape(text)}` -> `<h2>{text}`):
    # every heading is a literal of the module; the one character html.escape changes in them
    # is the apostrophe of "the paper's models", which a browser shows the same either way.
    ("r4 run_report: box text unescaped", "deffcore/views/run_report.py",
     "<b>{html.escape(title)}</b> {html.escape(text)}</div>",
     "<b>{html.escape(title)}</b> {text}</div>", REPORT),
    # EQUIVALENT (r4 run_report: table cells unescaped, `e(_cell(v))` -> `_cell(v)`): the
    # report's tables hold numbers formatted by the module, the POOLINGS names and literals
    # (the random null's seeds reach only their count); nothing a file says reaches a cell.
    ("r4 run_report: code unescaped", "deffcore/views/run_report.py",
     'self.parts.append(f"<pre><code>{html.escape(text)}</code></pre>")',
     'self.parts.append(f"<pre><code>{text}</code></pre>")', REPORT),
    ("r4 run_report: plotly.js in the second figure", "deffcore/views/run_report.py",
     "first=self.figures == 0", "first=self.figures == 1", REPORT),
    # -- the paired bootstrap (deffcore/statistics/paired.py)
    ("r4 paired: duplicated stored key", "deffcore/statistics/paired.py",
     "if not ok or len(set(keys)) != len(keys):", "if not ok:", PAIRED),
    ("r4 paired: stored B unbounded", "deffcore/statistics/paired.py",
     "2 <= B <= MAX_STORED_B and", "2 <= B and", PAIRED),
    ("r4 paired: basic interval ends swapped", "deffcore/statistics/paired.py",
     "(2 * point - q_hi, 2 * point - q_lo)", "(2 * point - q_lo, 2 * point - q_hi)", PAIRED),
    ("r4 paired: quantile 0.05", "deffcore/statistics/paired.py",
     "    alpha = (1.0 - ci) / 2.0\n    q_lo, q_hi", "    alpha = 1.0 - ci\n    q_lo, q_hi",
     PAIRED),
    ("r4 paired: stored difference of one replicate", "deffcore/statistics/paired.py",
     "2 <= B <= 100_000)", "1 <= B <= 100_000)", PAIRED),
    ("r4 paired: gap without the +1", "deffcore/statistics/paired.py",
     "np.asarray(x, dtype=np.float64) * (layers + 1) / 2.0",
     "np.asarray(x, dtype=np.float64) * layers / 2.0", PAIRED),
    ("r4 paired: stored profile beyond 1", "deffcore/statistics/paired.py",
     "(np.abs(values) <= 1 + 1e-6).all()", "(np.abs(values) <= 2).all()", PAIRED),
    # -- a snapshot's paired bootstrap is of its run (deffcore/views/run_schema.py)
    ("r4 run_schema: paired of another L or N", "deffcore/views/run_schema.py",
     'if (pb.layers, pb.n) != (data["layers"], data["n"]):', "if False:",
     "tests/test_paired_difference.py tests/test_run_schema.py"),
    # -- the position-0 test (deffcore/statistics/bos_answer.py)
    ("r4 position0: _worse is the better", "deffcore/statistics/bos_answer.py",
     "return max(known, key=order.index) if known else None",
     "return min(known, key=order.index) if known else None", POS0),
    ("r4 position0: unpaired need quadruples", "deffcore/statistics/bos_answer.py",
     "        m *= 2\n        scaled", "        m *= 4\n        scaled", POS0),
    ("r4 position0: unpaired bias as sqrt", "deffcore/statistics/bos_answer.py",
     "band * (bias_share * n / m + ", "band * (bias_share * math.sqrt(n / m) + ", POS0),
    ("r4 position0: paired need linear", "deffcore/statistics/bos_answer.py",
     "((point - bound) / point) ** 2)", "((point - bound) / point))", POS0),
    ("r4 position0: paired need at least n", "deffcore/statistics/bos_answer.py",
     "return max(m, 2 * n) if m == n else", "return m if m == n else", POS0),
    ("r4 position0: unsettled side asks n", "deffcore/statistics/bos_answer.py",
     "passages_action(2 * n, spec, source) if n else",
     "passages_action(n, spec, source) if n else", POS0),
    ("r4 position0: lower bound at the low quantile", "deffcore/statistics/bos_answer.py",
     "return 2.0 * point - float(np.quantile(reps, 1.0 - alpha))",
     "return 2.0 * point - float(np.quantile(reps, alpha))", POS0),
    ("r4 position0: unpaired artefact sign", "deffcore/statistics/bos_answer.py",
     "towards = abs(gap_default) > REGIME_TOLERANCE and delta * gap_default < 0",
     "towards = abs(gap_default) > REGIME_TOLERANCE and delta * gap_default > 0", POS0),
    ("r4 position0: paired tolerance without its floor", "deffcore/statistics/bos_answer.py",
     "Tr = np.maximum(POS0_MIN_POINTS, POS0_SHARE * np.abs(rd))",
     "Tr = POS0_SHARE * np.abs(rd)", POS0),
    # -- the live paired answer (deffcore/statistics/bos_answer.py)
    ("r4 anytime_paired: the noise action of no_pos0", "deffcore/statistics/bos_answer.py",
     'noisy = "default" if levels["default"] == "noise" else "no_pos0"', 'noisy = "no_pos0"',
     ANYTIME),
    ("r4 anytime_paired: h_0 in the stacks", "deffcore/statistics/bos_answer.py",
     "stacks = {p: states[p][1:] for p in", "stacks = {p: states[p] for p in", ANYTIME),
    ("r4 anytime_paired: no stand-in", "deffcore/statistics/bos_answer.py",
     "used = other if other and all(paired.has(p, other) for p in ANSWER_POOLINGS) else metric",
     "used = metric", ANYTIME),
    ("r4 anytime_paired: linear CKA's own delta unsaid", "deffcore/statistics/bos_answer.py",
     "        a = stood_in(a, used, float(asked))\n", "", ANYTIME),
    # -- Gromov–Wasserstein's default start (deffcore/measures/gw.py, SPEC 13.1): the lower GW^2
    # of the product and the identity starts; the names start "gw " (`--only "gw "`)
    ("gw start: the larger of the two starts", "deffcore/measures/gw.py",
     "    return min(_solve(C1, C2, _start(C1, C2, name), solver, epsilon) for name in names)",
     "    return max(_solve(C1, C2, _start(C1, C2, name), solver, epsilon) for name in names)",
     GW),
    ("gw start: the identity start dropped", "deffcore/measures/gw.py",
     'names = STARTS if init == "both" else (init,)',
     'names = ("product",) if init == "both" else (init,)', GW),
    ("gw start: the product start dropped", "deffcore/measures/gw.py",
     'names = STARTS if init == "both" else (init,)',
     'names = ("identity",) if init == "both" else (init,)', GW),
    ("gw start: the matrix keeps the larger", "deffcore/measures/gw.py",
     'return np.minimum(by_start["product"], by_start["identity"])',
     'return np.maximum(by_start["product"], by_start["identity"])', GW),
    ("gw start: the matrix is the product start's", "deffcore/measures/gw.py",
     'return np.minimum(by_start["product"], by_start["identity"])',
     'return by_start["product"]', GW),
    ("gw start: the default is the product start", "deffcore/measures/gw.py",
     'INITS: tuple[str, ...] = ("both", "product", "identity")',
     'INITS: tuple[str, ...] = ("product", "both", "identity")', GW),
    ("gw start: the identity start holds mass n", "deffcore/measures/gw.py",
     "    return np.eye(C1.shape[0]) / C1.shape[0]", "    return np.eye(C1.shape[0])", GW),
    ("gw start: compared before the round-off floor", "deffcore/measures/gw.py",
     "    return max(float(v), 0.0)  # round-off", "    return float(v)  # round-off", GW),
    ("gw start: distances not scale-free", "deffcore/measures/gw.py",
     "    return D / mean if mean > 0 else D", "    return D", GW),
    ("gw start: a failed plan's marginals pass", "deffcore/measures/gw.py",
     "\nMARGINAL_RTOL = 1e-2\n", "\nMARGINAL_RTOL = 1.0\n", GW),
    # -- the one output rule (deffcore/core/files.py), beside the "outputs:" entries above
    ("files rule: a cache entry writable", "deffcore/core/files.py",
     "    if root in target.parents and target.parent != root:",
     "    if False:", OUTPUTS),
    ("files rule: another run's snapshot replaced", "deffcore/core/files.py",
     "        if why is None and replaceable is not None:\n            why = replaceable(path)\n",
     "", OUTPUTS),
    ("files rule: an hf: input overwritten", "deffcore/core/files.py",
     '    text = str(spec or "").removeprefix("hf:")', '    text = str(spec or "")', OUTPUTS),
    # -- a model folder's config (deffcore/inputs/model.py)
    ("files rule: model_config: bools are sizes", "deffcore/inputs/model.py",
     "isinstance(value, int) and not isinstance(value, bool) and low <= value <= high",
     "isinstance(value, int) and low <= value <= high", MODEL_CONFIG),
    ("files rule: model_config: sizes unbounded above", "deffcore/inputs/model.py",
     "isinstance(value, int) and not isinstance(value, bool) and low <= value <= high",
     "isinstance(value, int) and not isinstance(value, bool) and low <= value", MODEL_CONFIG),
    ("files rule: model_config: heads need not divide", "deffcore/inputs/model.py",
     "    if width is not None and heads is not None and no_head_dim and width % heads:",
     "    if False:", MODEL_CONFIG),
    ("files rule: model_config: kv heads need not divide", "deffcore/inputs/model.py",
     "(kv > heads or heads % kv)", "(kv > heads)", MODEL_CONFIG),
    ("files rule: model_config: sub-configs unchecked", "deffcore/inputs/model.py",
     '        if isinstance(key, str) and key.endswith("_config") and isinstance(sub, dict):',
     "        if False:", MODEL_CONFIG),
    ("files rule: model_config: encoder-decoders allowed", "deffcore/inputs/model.py",
     "    if encoder_decoder:\n        return ENC_DEC_REASON\n", "", MODEL_CONFIG),
    ("files rule: model_config: architectures unchecked", "deffcore/inputs/model.py",
     "    if names is not None and not (", "    if False and not (", MODEL_CONFIG),
    # -- the run's one BOS answer (deffcore/statistics/bos_answer.py); "merge " names
    ("merge run_answer: no stand-in", "deffcore/statistics/bos_answer.py",
     "other = STAND_IN.get(metric) if stand_in and has_pair else None", "other = None",
     ANSWER),
    ("merge run_answer: stood in over an identical control", "deffcore/statistics/bos_answer.py",
     "    if asked.identical is not None or asked.delta is None:",
     "    if asked.delta is None:", ANSWER),
    ("merge run_answer: replicates swapped", "deffcore/statistics/bos_answer.py",
     'replicates = (pb.gap("default", metric, K)[1], pb.gap("no_pos0", metric, K)[1])',
     'replicates = (pb.gap("no_pos0", metric, K)[1], pb.gap("default", metric, K)[1])',
     ANSWER),
    ("merge run_answer: trust without the replicates' interval",
     "deffcore/statistics/bos_answer.py",
     'ci_d = _replicate_interval(pb, "default", metric, K) if has_pair else None',
     "ci_d = None", ANSWER),
    ("merge run_answer: no bias share", "deffcore/statistics/bos_answer.py",
     "bias_share=min(1.0, bias / total) if total else 0.0,", "bias_share=0.0,", ANSWER),
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
        pytest = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
        cmd = [*pytest, *shlex.split(tests)]
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
