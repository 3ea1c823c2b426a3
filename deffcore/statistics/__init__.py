"""Stage 4, how far to trust a number: the passage bootstrap, the trust rule, estimates as a run
grows, stopping.
"""
