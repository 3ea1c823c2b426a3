"""`dc.atlas(...)`: a run's depth-use atlas beside its D_eff, computed, stored and read back.

Stage: lenses (on top of `deffcore.runs.measure`).

    import deffcore as dc
    a = dc.atlas("smollm2-135m", n=512)               # a named model on bbc-news
    a = dc.atlas(model, tokenizer, texts)             # a transformers model in memory
    a.relative_contribution, a.alignment, a.block_influence    # (L,), block 1 first
    a.angular_distance                                # (L+1, L+1) over h_0 .. h_L
    a.phase_point, a.intervals["alignment"], a.to_dict()
    a.logit_lens["kl"], a.geometry["rotation_angle"]   # where predictions form, block geometry
    a = dc.atlas("smollm2-135m", skip_effect=True)    # + the skip effect on 64 passages
    a = dc.atlas("smollm2-135m", logit_lens=True)     # + where predictions form (SPEC 16.2)

The run is measured as `measure` measures it (same spec, same cache entry, same key): a run
extracted now takes its atlas during that extraction; a run already cached with its atlas reads
it back; a run cached before the atlas existed (or resumed, or served from a larger run) gets
one extra extraction pass that computes only what the atlas needs and keeps it beside the
entry. The skip effect runs on request (L + 1 forward passes of its passages at most) and is
kept too. `Atlas.run` carries the run's key, spec, D_eff, D_eff/L, gap%, rho_hat(1) and lag
profile (default pooling, the run's metric), so the atlas is read beside the run's own numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from deffcore.core.checks import check_int, check_seed
from deffcore.core.errors import DeffError, InvalidStatesError
from deffcore.extraction import atlas as atlas_store
from deffcore.lenses.atlas_skip import SKIP_PASSAGES, SkipRows, skip_rows
from deffcore.measures.atlas import Atlas, consecutive_geometry, summarize
from deffcore.views.atlas_read import run_info, stored_skip

Progress = Callable[[int, int, str], None]


def check_atlas_options(
    B: int, boot_seed: int, ci: float, skip_passages: int, n: int | None = None
) -> None:
    """The atlas's own options, checked before anything loads (one sentence each); B bounded
    (`statistics.bootstrap.check_b`), against the memory of `n` passages when known."""
    from deffcore.statistics.bootstrap import check_b

    check_b(B, "B (bootstrap resamples)", minimum=10, n=n if isinstance(n, int) else None)
    check_seed(boot_seed, "boot_seed")
    check_int(skip_passages, "skip_passages", 1)
    if not (isinstance(ci, float | int) and 0.5 <= float(ci) < 1.0):
        raise DeffError(f"ci must be a coverage between 0.5 and 1 (e.g. 0.95), got {ci!r}.")


class _Model:
    """The run's model, loaded at most once for the atlas pass and the skip effect."""

    def __init__(self, m: Any, loaded: Any, device: str | None, progress: Progress | None):
        self.m, self.loaded, self.device, self.progress = m, loaded, device, progress

    def get(self) -> Any:
        if self.loaded is None:
            from deffcore.inputs.model import load_model, resolve_device_dtype

            spec = self.m.spec
            if spec.model_spec.external:
                raise DeffError(
                    f"The run {spec.key()} is of a model held in memory; pass the model: "
                    "dc.atlas(model, tokenizer, texts)."
                )
            if self.progress is not None:
                self.progress(0, 1, f"loading {spec.model}")
            device = self.device or resolve_device_dtype(None, spec.dtype)[0]
            self.loaded = load_model(
                spec.model, revision=spec.revision, device=device, dtype=spec.dtype
            )
        return self.loaded


def _atlas_pass(
    m: Any, model: _Model, documents: list[str] | None, progress, should_stop, lens: bool = False
):
    """One extraction that takes only the atlas (a run cached before it existed, or the logit
    lens asked of a run whose atlas has none)."""
    from deffcore.runs.measure import extract_spec

    taps = atlas_store.atlas_taps(lens)
    pooled = extract_spec(
        m.spec,
        loaded=model.get(),
        documents=documents,
        taps=taps,
        progress=_staged(progress, "atlas"),
        should_stop=should_stop,
    )
    rows = atlas_store.keep_atlas(m.spec, taps, pooled)
    if rows is None or rows.n != m.n:
        raise DeffError(f"The depth-use atlas of run {m.spec.key()} could not be computed.")
    return rows


def _staged(progress: Progress | None, what: str) -> Progress | None:
    if progress is None:
        return None
    return lambda done, total, stage: progress(done, total, f"{what}: {stage}")


def kept_token_ids(m: Any, tokenizer: Any, documents: list[str] | None = None) -> list[list[int]]:
    """The token ids of the run's kept passages, in the run's order (what its rows are)."""
    from deffcore.inputs.texts import keep_long_enough, run_texts, run_token_ids

    docs = run_texts(m.spec) if documents is None else documents
    ids = run_token_ids(m.spec, tokenizer, docs)
    return keep_long_enough([list(s[: m.spec.max_tokens]) for s in ids])[0]


def _skip(m, model: _Model, documents, passages, progress, should_stop) -> None:
    """Compute and keep the skip effect on the run's first `passages` kept passages."""
    import contextlib

    loaded = model.get()
    ids = kept_token_ids(m, loaded.tokenizer, documents)[:passages]
    with contextlib.ExitStack() as stack:
        if m.spec.intervention != "none":
            from deffcore.inputs.interventions import norm_intervention

            stack.enter_context(norm_intervention(loaded.model, m.spec.intervention))
        rows: SkipRows = skip_rows(loaded, ids, progress=progress, should_stop=should_stop)
    atlas_store.write_skip(m.spec, rows)


def atlas_of(
    m: Any,
    *,
    loaded: Any = None,
    documents: list[str] | None = None,
    skip_effect: bool = False,
    skip_passages: int = SKIP_PASSAGES,
    logit_lens: bool = False,
    B: int = 100,
    boot_seed: int = 0,
    ci: float = 0.95,
    device: str | None = None,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Atlas:
    """The atlas of a measured run (`Measurement`): stored rows, else one atlas pass; the skip
    effect when asked (stored, else computed), the logit lens when asked (stored, else one atlas
    pass that takes it). `loaded`: the run's model if already in memory."""
    check_atlas_options(B, boot_seed, ci, skip_passages, n=m.n)
    model = _Model(m, loaded, device, progress)
    rows = atlas_store.read_rows(m.spec)
    lacks_lens = rows is not None and rows.lens is None and rows.lens_refused is None
    if rows is None or rows.n != m.n or (logit_lens and lacks_lens):
        rows = _atlas_pass(m, model, documents, progress, should_stop, lens=logit_lens)
    out = summarize(rows, B=B, seed=boot_seed, ci=ci)
    out.geometry = consecutive_geometry(m.states_with_h0("default"), out.relative_contribution)
    out.run = run_info(m)
    passages = min(skip_passages, m.n)
    if skip_effect and atlas_store.read_skip(m.spec, passages) is None:
        _skip(m, model, documents, passages, progress, should_stop)
    out.skip_effect = stored_skip(m, passages, B=B, seed=boot_seed, ci=ci)
    return out


def atlas(
    model_or_name: Any = "smollm2-135m",
    tokenizer: Any = None,
    texts: list[str] | str | None = None,
    *,
    dataset: str = "bbc-news",
    skip_effect: bool = False,
    skip_passages: int = SKIP_PASSAGES,
    logit_lens: bool = False,
    B: int = 100,
    boot_seed: int = 0,
    ci: float = 0.95,
    progress: Progress | None = None,
    **run: Any,
) -> Atlas:
    """The depth-use atlas of a run (module docstring). `texts` (a list of strings or a dataset
    spec) replaces `dataset`; `run` takes `measure`'s options (n, max_tokens, seed, metric,
    passages, bos, revision, device, dtype, intervention, batch_size, use_cache, cache_id,
    should_stop). Returns an `Atlas` with `run` (the run's key, spec and D_eff)."""
    from deffcore.runs.measure import measure

    check_atlas_options(B, boot_seed, ci, skip_passages, n=run.get("n"))
    if "random_seeds" in run:
        raise DeffError("The atlas measures one run; random_seeds belong to measure().")
    data = dataset if texts is None else texts
    opts = {
        "skip_effect": skip_effect,
        "skip_passages": skip_passages,
        "logit_lens": logit_lens,
        "B": B,
        "boot_seed": boot_seed,
        "ci": ci,
    }
    if isinstance(model_or_name, str) and tokenizer is None and isinstance(data, str):
        m = measure(model_or_name, dataset=data, progress=progress, **run)
        should_stop = run.get("should_stop")
        return atlas_of(
            m, device=run.get("device"), progress=progress, should_stop=should_stop, **opts
        )
    return _in_memory(model_or_name, tokenizer, data, opts, progress=progress, **run)


def _in_memory(model, tokenizer, texts, atlas_opts, *, progress, **options) -> Atlas:
    """`atlas` of a model in memory (or a spec with a list of strings), as `measure_model`;
    atlas_opts: `atlas_of`'s options."""
    from deffcore.runs import external
    from deffcore.runs.measure import measure_spec

    revision, device, dtype = (options.pop(k, None) for k in ("revision", "device", "dtype"))
    use_cache, cache_id = options.pop("use_cache", True), options.pop("cache_id", None)
    should_stop = options.pop("should_stop", None)
    external.check_in_memory_args(model, tokenizer, revision, device, dtype)
    if isinstance(model, str):
        held, cache_id = external.load_for_texts(
            model, texts, options.get("max_tokens", 128), revision, device, dtype
        )
        model, tokenizer = held.model, held.tokenizer
    plan = {
        "n": None,
        "max_tokens": 128,
        "seed": 0,
        "metric": "cka",
        "intervention": "none",
        "passages": "documents",
        "bos": "default",
        "batch_size": None,
        **options,
    }
    spec, loaded, docs, ids, _ = external.plan_loaded_run(
        model, tokenizer, texts, cache_id=cache_id if use_cache else None, random_seeds=(), **plan
    )
    run, wrapped = external.pin(spec, loaded, model, spec.model, ids)
    with external.eval_mode(model):
        m = measure_spec(
            run,
            metric=plan["metric"],
            device=loaded.device,
            loaded=wrapped,
            batch_size=plan["batch_size"],
            progress=progress,
            documents=docs,
            use_cache=cache_id is not None and use_cache,
            should_stop=should_stop,
        )
        return atlas_of(
            m,
            loaded=wrapped,
            documents=docs,
            progress=progress,
            should_stop=should_stop,
            **atlas_opts,
        )


def atlas_states(
    states: Any, mask: Any = None, *, B: int = 100, boot_seed: int = 0, ci: float = 0.95
) -> Atlas:
    """The atlas of hidden states computed elsewhere: h_0 .. h_L, each (N, T, d), with the
    attention mask (N, T), as `measure_states` takes them (`deffcore.runs.external`; h_L before the
    final norm). No sublayer split (the states do not carry the MLP's write) and no skip effect
    (that needs the model)."""
    from deffcore.extraction.atlas import rows_from_states
    from deffcore.runs import external

    check_atlas_options(B, boot_seed, ci, 1)
    layers = external._check_states(states)
    n, t = int(layers[0].shape[0]), int(layers[0].shape[1])
    check_atlas_options(B, boot_seed, ci, 1, n=n)  # B x N resample weights fit in memory
    keep = external._check_mask(mask, n, t, layers[0].device)
    if int(keep.sum(1).min()) < 1:
        raise DeffError("Every passage needs at least one real token (the mask has an empty row).")
    rows = rows_from_states(layers, keep.cpu())
    if not all(np.isfinite(a).all() for a in (rows.r, rows.c, rows.bi, rows.angular)):
        raise InvalidStatesError("The states hold NaN or inf at a real token; no atlas of them.")
    return summarize(rows, B=B, seed=boot_seed, ci=ci)
