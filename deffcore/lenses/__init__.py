"""Stage 8, lenses on a run: the BOS and attention-sink diagnostics, the BOS page's one answer."""
