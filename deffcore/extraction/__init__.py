"""Stage 2, the forward pass: hooks and batches pool each layer's residual stream, kept in the
cache on disk.
"""
