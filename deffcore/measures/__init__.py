"""Stage 3, numbers from pooled states: similarity, lag profile and D_eff, references,
constructions, other geometries.
"""
