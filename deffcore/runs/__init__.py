"""Stage 7, one run from spec to numbers: checks before anything loads, the plan, the measurement,
live estimates.
"""
