"""Stage 0, the vocabulary every stage shares: names, errors, where files live, argument checks,
safe text and files.
"""
