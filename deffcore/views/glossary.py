"""Words a newcomer understands: a glossary of every symbol and term, and human column names.

    GLOSSARY        term or symbol -> one or two plain-language sentences
    COLUMN_LABELS   snake_case result keys (deff_over_L, gap_pct, rho1, F_h0+corr, k_1.10, ...)
                    -> the column names a person reads
    human_columns   rename a DataFrame's known columns (and index name) with COLUMN_LABELS
    glossary_markdown   the glossary (or some of its terms) as a Markdown list, for an expander

Wording decision: the regimes of the gap to F_L are said in words, not as "sub-reference":
gap > 0 is "more redundant than orthogonal updates", gap < 0 "less redundant".
Pooling names (default, first_non_bos, ...) stay as they are: they are the names of the
controls the sidebar offers, and the glossary explains each one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from deffcore.core.lazy import pd  # imported on first use: a chart never needs it

#: term or symbol -> one or two plain-language sentences. Keys are what a page shows.
GLOSSARY: dict[str, str] = {
    # --- the measurement
    "L": "The number of layers (blocks) of the model, or of a synthetic construction.",
    "N": "The number of passages (texts) measured: one pooled vector per passage and layer.",
    "d": "The width of the residual stream: how many numbers describe one token's state.",
    "h_0": "The input of the first block (the token embeddings, after any scaling). Every "
    "later state keeps it, because each block only adds to what it receives.",
    "h_l": "The residual stream after block l: the running sum h_0 + f_1 + ... + f_l.",
    "update f_l": "What block l adds to the residual stream: f_l = h_l - h_{l-1}.",
    "residual stream": "The vector each token carries through the network; every block reads "
    "it and adds its update to it.",
    "S (similarity matrix)": "An L x L table: S(i, j) says how alike the states of layers i "
    "and j are across the passages (1 = the same up to scale and rotation, 0 = unrelated).",
    "D_eff": "Effective depth: how many genuinely different layers the similarity matrix is "
    "worth. L identical layers give 1; L unrelated layers give L. D_eff = L² / sum of S.",
    "D_eff/L": "Effective depth as a fraction of the layers: 1 means every layer differs, "
    "1/L means all layers are the same.",
    "F_L": "The reference depth 2L/(L+1): what D_eff would be if every layer added one new, "
    "unrelated update of equal size. It stays below 2 however deep the model is.",
    "gap": "Gap to F_L, in percent: 100 (1 - D_eff / F_L). Positive: more redundant than "
    "orthogonal updates; negative: less redundant.",
    "gap_pct": "Gap to F_L, in percent: 100 (1 - D_eff / F_L).",
    "more redundant than orthogonal updates": "D_eff is below F_L (gap > 0): the layers are "
    "more alike than accumulating new, unrelated updates would make them. The paper calls "
    "this 'sub-reference'.",
    "less redundant than orthogonal updates": "D_eff is above F_L (gap < 0): the layers differ "
    "more than accumulated orthogonal updates would. The paper calls this 'above reference'.",
    "ρ̂(1)": "The mean similarity of neighbouring layers, S(l, l+1): how much one layer looks "
    "like the next. Written rho_hat(1) or rho1 in files.",
    "lag k": "How many layers apart two states are (k = j - i).",
    "lag profile": "ρ(k), the mean similarity of layers k apart, for k = 1 .. L-1: how fast "
    "layers forget each other with distance.",
    "K (maximum lag)": "D_eff counts the lag profile only up to lag K; K = L-1 (all lags) is "
    "the default.",
    # --- metrics
    "CKA": "Linear centred kernel alignment: a similarity of two layers' N x d matrices that "
    "ignores rotations and overall scale. The paper's metric and the default here.",
    "linear CKA": "See CKA. With few passages it is biased upwards by about d/(N+d).",
    "unbiased CKA": "CKA built on an unbiased estimator, so unrelated layers score about 0 even "
    "with few passages. It can come out slightly negative.",
    "cosine": "The mean, over passages, of the cosine of the angle between two layers' pooled "
    "vectors. It is not centred, so a shared offset makes everything look alike.",
    "orthogonal Procrustes": "A SPEC 17 measure: how close one layer's centred, scaled "
    "passages come to the other's after the best rotation (1: a rotation of each other).",
    "mutual kNN": "A SPEC 17 measure: the share of each passage's k = 10 nearest passages (by "
    "cosine) that two layers agree on.",
    "CKNNA": "A SPEC 17 measure: unbiased CKA restricted to passage pairs that are mutual "
    "nearest neighbours in both layers.",
    "RSA": "A SPEC 17 measure: the Spearman correlation of two layers' passage-by-passage "
    "distance matrices (representational similarity analysis).",
    "SVCCA": "A SPEC 17 measure: the mean canonical correlation of the two layers' top "
    "singular directions (99% of their variance).",
    "PWCCA": "A SPEC 17 measure: canonical correlations of the two layers weighted by how much "
    "of each layer they account for.",
    "finite-sample bias": "With N passages of d features, linear CKA of unrelated layers is about "
    "b = d/(N+d), not 0. It makes every layer look more alike and lowers D_eff.",
    "b = d/(N+d)": "The finite-sample bias of linear CKA for unrelated, isotropic data.",
    "iid reference": "D_eff of independent random states measured with linear CKA at this N and "
    "d: L / (1 + b(L-1)). Lying near it means 'only the bias', not depth.",
    # --- pooling
    "pooling": "How one passage's many token states become one vector per layer.",
    "pooling controls": "Alternative poolings that remove one suspected confound (the first "
    "token, the token norms, the top principal directions) to see whether the gap survives.",
    "default": "Pooling: the mean over all tokens of the passage, the first token included.",
    "first_non_bos": "Pooling: the state of the second token only (the one after BOS).",
    "token_normed": "Pooling: every token state scaled to length 1 before the mean, so a few "
    "huge tokens cannot dominate.",
    "no_pos0": "Pooling: the mean over the tokens after position 0, whatever token sits there "
    "(the symmetric position-0 control; with or without a BOS).",
    "top1_pc": "Pooling: the default, with the single strongest shared direction removed.",
    "top3_pc": "Pooling: the default, with the three strongest shared directions removed.",
    # --- first token
    "BOS": "The beginning-of-sequence token some tokenizers put in front of every passage.",
    "BOS default": "BOS option: the tokenizer's own special tokens (a BOS where it adds one).",
    "BOS add": "BOS option: exactly one BOS token at position 0 of every passage.",
    "BOS none": "BOS option: no BOS token, even where the tokenizer adds one (the text alone).",
    "position-0 norm ratio": "‖h(pos 0)‖ / mean ‖h(t ≥ 1)‖: how many times longer the whole "
    "first-token state is than the other tokens' states, per layer over all N passages. "
    "Not the massive-activation ratio: a long state can hold many moderate values.",
    "massive-activation ratio": "The project's summary: each passage's largest single feature "
    "|h_j|, averaged over 64 passages, divided by the median |h_j|, per layer: one huge "
    "number, not a whole state's length. Above 100x it is called massive. Not Sun et al.'s "
    "criterion, which judges each activation.",
    "position-0 test": "default vs no_pos0: Δ = gap(no_pos0) - gap(default), with a paired "
    "interval: both gaps evaluated on the same bootstrap resamples of the run's passages, so "
    "their shared errors cancel (unpaired, both errors added, when the run has no such "
    "bootstrap yet). 'Not a position-0 artefact' when Δ lies within the tolerance (half the "
    "gap, at least 2 points, itself uncertain); 'a position-0 artefact' when it is beyond it "
    "and the gap shrinks without position 0; otherwise 'cannot tell yet'.",
    "paired interval": "The interval of a difference of two numbers measured on the same "
    "passages, from one bootstrap: each resample of the passages gives both numbers, and the "
    "interval is that of their differences (not the sum of the two numbers' errors).",
    "massive activation": "A few huge values in one token's state (often the first token) that "
    "dwarf everything else and can dominate a mean over tokens.",
    "attention sink": "A token (often the first) that many heads attend to by default; it tends "
    "to carry a massive activation.",
    "Sun et al.'s criterion": "Sun et al. (2024) call an activation massive when it exceeds 100 "
    "in size and is at least 1,000 times the median size in its own layer; reported as the "
    "share of passages holding one, per layer, beside the project's ratio.",
    "Gu et al.'s sink metric": "Gu et al. (2024): a head is a sink in a passage when the "
    "attention of every query to the first token, the first query included, averages more "
    "than 0.3; decided per passage, then averaged (on whole passages or their first 64 "
    "tokens). The project's score averages over passages first and leaves the first query out.",
    "Gu et al.'s metric on whole passages": "Gu et al.'s sink metric with every token of each "
    "diagnosed passage, whatever its length.",
    "Gu et al.'s metric on first 64 tokens": "Gu et al.'s sink metric on each passage's first 64 "
    "tokens, the length Gu et al. measured on, so its numbers compare with their paper's.",
    "uniform attention baseline": "What a head that spreads its attention evenly over the "
    "earlier tokens would score on the sink test: 0.5 at 2 tokens, 0.06 at 64. Passages under "
    "6 tokens are left out of the sink test because even uniform attention passes 0.3 there.",
    "identical control": "A control that equals another for this run, for example no_pos0 and "
    "default when every passage has the same length and first token; it is counted once.",
    "at the reference": "A gap to F_L too close to 0 to call a regime: within ±1 point, or an "
    "interval that contains 0.",
    # --- references
    "accumulated orthogonal updates": "The story's step 2: every layer adds one new, "
    "unrelated update of equal size, no h_0; exactly D_eff = F_L.",
    "persistent h_0": "The story's step 3: the sum starts from an h_0 that every later state "
    "keeps, which makes all states more alike.",
    "orthogonal updates on h_0": "The free sweep's construction: a random h_0 as large as one "
    "update (scale s = 1), then unrelated updates of size s. The shared h_0 and the "
    "finite-sample bias put it below F_L; large s and N >> d bring it to F_L.",
    "orthogonal updates": "A construction in which every layer adds a new, unrelated update; "
    "equal sizes and no h_0 give exactly D_eff = F_L.",
    "independent states": "A construction in which every layer is drawn afresh; D_eff = L "
    "without bias, the iid reference with it.",
    "orthogonal states": "A construction whose layers point in mutually perpendicular "
    "directions: CKA between layers is exactly 0 and D_eff/L = 1.",
    "correlated updates": "Updates that push in related directions (correlation ρ^k for updates "
    "k apart); they make states more alike and lower D_eff.",
    "growing update norms": "Later updates larger than earlier ones; they swamp the past, make "
    "early and late states differ more and raise D_eff.",
    "matched references": "Versions of F_L rebuilt from what was measured (update sizes, h_0, "
    "update correlations), to see which ingredient explains the gap.",
    "F_norm": "The reference with the measured update sizes (no h_0, unrelated updates).",
    "F_h0+norm": "F_norm plus the measured persistent initial state h_0.",
    "F_h0+corr": "F_h0+norm plus the measured correlations between updates.",
    "D_eff of updates": "Effective depth of the updates f_l themselves rather than of the "
    "accumulated states: how different the blocks' contributions are.",
    "‖f‖/‖h‖": "The size of a block's update relative to the state it updates (mean over "
    "layers): small values mean each layer changes the stream little.",
    # --- baselines and uncertainty
    "random-weight null": "The same architecture with fresh random weights: what D_eff is "
    "before any training, several seeds.",
    "bootstrap CI": "A 95% range for D_eff/L from re-measuring on passages drawn again with "
    "replacement; it shows how much the number depends on which passages were used.",
    "trust badge": "How far to trust a headline number: solid (within 2% of its value at "
    "unlimited passages, checked on constructions with a known answer), indicative, or noise "
    "(possibly off by more than 10%).",
    "bias-corrected value": "The headline with its estimated finite-sample bias removed: D_eff/L "
    "under unbiased CKA, or the bootstrap's correction 2 x point - mean of the replicates.",
    "differs from random weights": "Said only when the bootstrap interval does not overlap the "
    "random-weight band and that band comes from at least 5 seeds.",
    "documents": "Passages: one passage per document, its first max-tokens tokens.",
    "windows": "Passages cut as fixed-length token windows from a long text instead of one "
    "document each.",
    "packed": "See packed windows.",
    "packed windows": "Token windows cut after joining all documents into one stream (a blank "
    "line between documents), so a window may span two documents; short documents then waste "
    "fewer tokens and give more windows.",
    # --- where a run comes from, and what the sidebar offers
    "Packaged (offline)": "Model source: a model shipped as a pip package (SmolLM2-135M, "
    "Gemma-3-270M) or a tiny demo model; nothing is downloaded.",
    "Hugging Face id": "Model source: a model on the Hugging Face hub by its id (needs the "
    "network, or the model already on disk).",
    "Local path": "Model source: a model folder or .gguf file on the server (when the server "
    "allows local paths).",
    "BBC news (offline)": "Dataset source: 2,225 BBC news articles shipped as a pip package.",
    "Hugging Face dataset": "Dataset source: hf:<name>[:<config>]:<split>[:<column>].",
    "Upload a file": "Dataset source: a .txt, .jsonl, .csv or .parquet file you upload.",
    "Local file": "Dataset source: a file on the server (when the server allows local paths).",
    "paper": "A value the paper publishes (N = 10,000 FineWeb-Edu passages): display only.",
    "precomputed": "A run shipped with the app as a snapshot: shown before anything runs.",
    "shared": "A run someone sent as a snapshot file, kept with your runs.",
    "cached": "A run measured on this machine, kept in its cache.",
    "trained": "The model's own trained weights.",
    "random": "Freshly initialised weights (the random-weight null).",
    "serial": "Sweep engine: one cell after another in this server.",
    "ray": "Sweep engine: cells as tasks on a Ray runtime (local, or a cluster).",
    "Residual-carry checkpoints": "Checkpoints the Residual carry lab saved while training.",
    "Local checkpoint folder": "A folder of save_pretrained checkpoint sub-folders.",
    "Hugging Face revisions": "Revisions (branches, tags) of one hub model, e.g. Pythia's steps.",
    # --- labs
    "BI": "Block Influence: 1 minus the mean cosine between a block's input and output. Low BI "
    "means the block changes little.",
    "ΔD_eff": "Local ΔD_eff: how much D_eff changes when one layer is left out of S; a "
    "per-layer importance score compared with BI.",
    "pruning tolerance": "How many blocks a model can lose: k₁.₁₀, the most blocks (lowest "
    "Block Influence first) skipped with perplexity within 1.10 × PPL₀, and f₁.₁₀ = k₁.₁₀ / L "
    "(the paper's Table S17); from the stored pruning checks of this machine.",
    "benchmark scores": "Scores of models on a task that you supply as a CSV (model, task, "
    "score), correlated with their depth numbers; nothing is measured for them here.",
    "k₁.₁₀": "The most blocks that can be skipped (lowest-ranked first) while the held-out "
    "perplexity stays within 1.10 times the unpruned perplexity.",
    "perplexity": "How surprised the model is by held-out text (lower is better); PPL₀ is the "
    "value with no block skipped.",
    "Spearman": "Rank correlation of two scores: 1 when they order the blocks the same way.",
    "norm interventions": "Replacing some normalisation layers by the identity at inference "
    "(no post: the post-attention and post-feed-forward norms; no QK: the query/key norms).",
    "intervention none": "Norm intervention: none, the model as trained.",
    "no post": "Norm intervention: the post-attention and post-feed-forward norms replaced by "
    "the identity (inference only).",
    "no QK": "Norm intervention: the query and key norms replaced by the identity.",
    "no post/no QK": "Norm intervention: both no post and no QK.",
    "γ (residual carry)": "How much of the previous state a block keeps: h_l = γ h_{l-1} + "
    "block(h_{l-1}); γ = 1 is the ordinary residual stream.",
    "checkpoint": "The model's weights saved at one point of training.",
    "aggregation": "A way of turning S into an effective number of layers; D_eff is one, the "
    "participation ratio, spectral-entropy rank, Geyer ESS and exponential fit are others.",
    "ξ": "The correlation length of an exponential fit ρ(k) ≈ exp(-k/ξ), in layers.",
    # --- further lenses (SPEC 13)
    "f₁.₁₀": "Pruning tolerance: k₁.₁₀ divided by the number of layers, the share of blocks "
    "that can be skipped within 1.10 times the unpruned perplexity.",
    "Pearson r": "Linear correlation across models: 1 when the points lie on a rising line.",
    "leave-one-out": "The correlation again with one model left out, for every model: a "
    "correlation that one model carries changes a lot there.",
    "leave-one-family-out": "The correlation again with one model family (all Pythia, all "
    "Qwen, ...) left out: shows whether one family drives it.",
    "exact permutation p": "The share of all orderings of the scores that correlate at least "
    "as strongly as the real one; exact for few models, where the usual formula is rough.",
    "coupling product": "GW's start from the product coupling (every passage of one layer with "
    "every passage of the other, equally): POT's default and the paper's; only it is compared "
    "with Table S22.",
    "coupling both": "GW solved twice, from the product and from the identity coupling, and the "
    "smaller GW² kept: a better local optimum, not the paper's number.",
    "coupling identity": "GW's start from the identity coupling (passage a of one layer with "
    "passage a of the other, as CKA pairs them): it finds the alignment CKA assumes.",
    "Gromov–Wasserstein": "A distance between two point clouds that compares only their "
    "internal distances, with no matching of points given; GW² is 0 for a rotated or "
    "shuffled copy of the same cloud. The solver finds a local optimum from its starting "
    "coupling: POT's product coupling by default (the paper's), which every result records.",
    "geodesic efficiency": "How straight the path through the layers is: the angle between "
    "the first and last layer (arccos of their CKA) divided by the sum of the angles between "
    "neighbouring layers. 1 for a straight path; orthogonal updates give less.",
    "turning angle": "How sharply the layer path bends at a layer: 0 straight on, 90° a right "
    "angle (what orthogonal updates give).",
    "short pretraining": "Training a small model from random weights for a short while, to "
    "see whether an effect of the pretrained model appears early.",
    # --- the depth-use atlas (SPEC 16): each measure with its paper
    "depth-use atlas": "Other papers' measures of how a model uses its depth, taken on the same "
    "passages as D_eff during the same forward pass, each with a passage-bootstrap interval.",
    "relative contribution": "r_l = ‖u_l‖ / ‖h_{l−1}‖: how large block l's write u_l = h_l − "
    "h_{l−1} is against the stream it reads, per token, averaged within each passage and then "
    "over passages. Csordás, Manning & Potts (2025), 'Do Language Models Use Their Depth "
    "Efficiently?', §3.",
    "alignment": "c_l = cos(u_l, h_{l−1}): negative when block l erases what the stream holds, "
    "near 0 when it writes a new direction, positive when it amplifies it (per token, then "
    "averaged). Csordás, Manning & Potts (2025), §3.",
    "Block Influence": "BI_l = 1 − cos(h_{l−1}, h_l), averaged over tokens: how far block l "
    "turns the stream; a low BI marks a block ShortGPT would remove. Men et al. (2024), "
    "'ShortGPT: Layers in Large Language Models are More Redundant Than You Expect'.",
    "angular distance": "d(i, j) = arccos(cos(h_i, h_j)) / π at each passage's last token, "
    "averaged over passages: 0 for the same direction, 1 for opposite ones. Gromov et al. "
    "(ICLR 2025), 'The Unreasonable Ineffectiveness of the Deeper Layers'.",
    "Gromov et al.'s block": "The n consecutive blocks whose input and output are closest in "
    "angular distance, the ones Gromov et al. (ICLR 2025) drop; at a 10% budget, the most "
    "blocks that can go with d ≤ 0.1, and L minus that is the depth they keep.",
    "phase point": "The block after which every relative contribution stays below half the "
    "median of the first half of the network: a simple change point for the phase change "
    "Csordás et al. (2025) report between contributing and refining layers (SPEC 16).",
    "skip effect": "Skip block s (its input passes through) and rerun the later blocks: the mean "
    "relative change of each later block's write and the mean next-token KL divergence of the "
    "output. Csordás, Manning & Potts (2025), §3.2.",
    "logit lens": "The model's own final norm and unembedding applied to the residual stream "
    "h_l of an earlier layer, read as a next-token distribution p_l; KL(p_L ‖ p_l) is what "
    "layer l still misses of the final prediction, and top-1 agreement the share of tokens "
    "whose most likely next token is already the final one (nostalgebraist 2020; SPEC 16.2).",
    "prediction depth": "Per token, the first layer from which the logit lens's top-1 stays the "
    "final top-1 through the last layer, averaged over tokens and passages: where the "
    "prediction is settled (after Gupta et al. 2025 and Csordás et al. 2025; SPEC 16.2).",
}

#: snake_case result keys -> column names a person reads (used by `human_columns`).
COLUMN_LABELS: dict[str, str] = {
    "deff": "D_eff",
    "deff_over_L": "D_eff / L",
    "deff_over_L_at_K": "D_eff / L at K",
    "gap_pct": "Gap to F_L (%)",
    "gap": "Gap to F_L (%)",
    "rho1": "ρ̂(1)",
    "rho_hat_1": "ρ̂(1)",
    "rho": "ρ(k)",
    "reference_FL": "F_L",
    "F_L": "F_L (orthogonal updates)",
    "F_norm": "F_norm (update sizes)",
    "F_h0+norm": "F_h0+norm (+ h_0)",
    "F_h0+corr": "F_h0+corr (+ correlations)",
    "gap_pct_F_L": "Gap to F_L (%)",
    "gap_pct_F_norm": "Gap to F_norm (%)",
    "gap_pct_F_h0+norm": "Gap to F_h0+norm (%)",
    "gap_pct_F_h0+corr": "Gap to F_h0+corr (%)",
    "a0": "‖h_0‖² (a₀)",
    "update_sizes": "Update sizes ‖f_l‖²",
    "rho_upd": "ρ(k) of updates",
    "deff_upd": "D_eff of updates",
    "deff_upd_over_L": "D_eff(update)/L",
    "deff_h_over_L": "D_eff(h)/L",
    "rho1_upd": "ρ̂(1) of updates",
    "update_to_state_norm": "‖f‖/‖h‖",
    "f_over_h": "‖f‖/‖h‖",
    "val_loss": "Validation loss",
    "gamma": "γ",
    "seeds": "Seeds",
    "seed": "Seed",
    "step": "Step",
    "tokens": "Tokens",
    "status": "Status",
    "reason": "Why missing",
    "label": "Checkpoint",
    "k_1.10": "k₁.₁₀",
    "f_1.10": "f₁.₁₀",
    "ppl0": "PPL₀ (held-out)",
    "k_110": "k₁.₁₀",
    "f_110": "f₁.₁₀",
    "pearson_r": "Pearson r",
    "pearson_p": "p (Pearson)",
    "spearman_rho": "Spearman ρ",
    "spearman_gw_cka": "ρ(GW, CKA)",
    "spearman_lag_gw": "ρ(|i−j|, GW)",
    "spearman_lag_cka": "ρ(|i−j|, CKA)",
    "geodesic_efficiency": "Geodesic efficiency",
    "euclidean_efficiency": "Euclidean chord/path",
    "ppl": "Perplexity",
    "block_influence": "Block Influence (BI)",
    "local_delta_deff": "Local ΔD_eff",
    "local_deff": "Local ΔD_eff",
    "bi": "Block Influence (BI)",
    "spearman_bi_vs_local_deff": "Spearman (BI, ΔD_eff)",
    "spearman_p": "Spearman p",
    "n_heldout": "Held-out passages",
    "heldout_tokens": "Held-out tokens",
    "pos0_norm_ratio": "Position-0 norm ratio",
    "pos0_ratio": "Position-0 norm ratio",
    "cka_bias": "CKA bias d/(N+d)",
    "iid_reference_deff_over_L": "iid reference D / L",
    "n": "N (passages)",
    "d": "d (features)",
    "d_model": "d (features)",
    "layers": "L (layers)",
    "L": "L (layers)",
    "max_tokens": "Max tokens",
    "model": "Model",
    "dataset": "Dataset",
    "pooling": "Pooling",
    "metric": "Metric",
    "source": "Source",
    "construction": "Construction",
    "intervention": "Intervention",
    "aggregation": "Aggregation",
    "value_over_L": "Value / L",
    "xi": "ξ (layers)",
    "cka": "linear CKA",
    "unbiased_cka": "unbiased CKA",
    "cosine": "cosine",
    "elapsed_s": "Seconds",
    "created": "Created",
    "revision": "Revision",
    "quantity": "Quantity",
    "value": "Value",
    "family": "Family",
    "bias": "CKA bias b",
    "ci_low": "95% CI low",
    "ci_high": "95% CI high",
    # the depth-use atlas (SPEC 16)
    "block": "Block",
    "relative_contribution": "Relative contribution r_l",
    "alignment": "Alignment c_l",
    "block_influence_tokens": "BI (token-weighted, ShortGPT)",
    "attention_relative_contribution": "Attention r_l",
    "attention_alignment": "Attention c_l",
    "mlp_relative_contribution": "MLP r_l",
    "mlp_alignment": "MLP c_l",
    "phase_share": "Share of blocks past the phase point",
    "bi_second_half": "Mean BI, second half",
    "gromov_keep_share": "Depth kept by Gromov et al. (10%) / L",
    "r_late_over_early": "r_l second half / first half",
    "layer": "Layer",
    "kl": "KL(p_L ‖ p_l)",
    "top1_agreement": "Top-1 = final top-1",
    "displacement": "Displacement ‖h_l − h_{l−1}‖ / ‖h_{l−1}‖",
    "rotation_angle": "Procrustes rotation (degrees)",
    "procrustes_residual": "Procrustes residual",
}

_SNAKE = re.compile(r"^[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)+$")
#: Option values whose glossary term is spelled otherwise (the metrics' snake names).
ALIASES = {
    "cka": "CKA",
    "unbiased_cka": "unbiased CKA",
    "D_eff / L": "D_eff/L",  # the Correlation lab's axis names (glossary.human_label)
    "Gap to F_L (%)": "gap",
}
_LOWER = {term.lower(): term for term in GLOSSARY}


def term_for(option: str, label: str = "") -> str | None:
    """The glossary term of a widget's option, None when there is none: the option after a
    tail of the widget's label ("BOS" + "add" -> "BOS add", "Norm interventions" + "none" ->
    "intervention none"), else the option itself (case-insensitive, a story step's number and
    article dropped: "3 · A persistent h_0" -> "persistent h_0"), else `ALIASES`."""
    text = re.sub(r"^\d+ · ", "", str(option)).removesuffix(" (F_L)")
    text = re.sub(r"^(a|the) ", "", text, flags=re.IGNORECASE)
    words = str(label).lower().split()
    tails = [" ".join(words[i:]) for i in range(len(words))]
    tails += [t.removesuffix("s") for t in tails]
    for candidate in [f"{t} {text}" for t in tails] + [text]:
        if candidate.lower() in _LOWER:
            return _LOWER[candidate.lower()]
    if text in ALIASES:
        return ALIASES[text]
    short = re.sub(r" \([^)]*\)$", "", text)  # "Pruning tolerance (stored checks)"
    return term_for(short, label) if short != text else None


def human_label(name: object) -> object:
    """One column name for a person: COLUMN_LABELS, else snake_case with spaces; others as is.

    Pooling names (default, first_non_bos, ...) are kept: they name the sidebar's controls.
    """
    from deffcore.core.constants import POOLINGS

    if not isinstance(name, str):
        return name
    if name in COLUMN_LABELS:
        return COLUMN_LABELS[name]
    if name in POOLINGS:
        return name
    if _SNAKE.match(name):
        return name.replace("_", " ")
    return name


def human_columns(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of `df` with its column names (and index name) made human (`human_label`)."""
    out = df.rename(columns=human_label)
    if out.index.name is not None:
        out.index.name = human_label(out.index.name)
    return out


def glossary_markdown(terms: Iterable[str] | None = None) -> str:
    """The glossary (all terms, or the given ones in that order) as a Markdown bullet list."""
    chosen = list(GLOSSARY) if terms is None else [t for t in terms if t in GLOSSARY]
    return "\n".join(f"- **{term}**: {GLOSSARY[term]}" for term in chosen)
