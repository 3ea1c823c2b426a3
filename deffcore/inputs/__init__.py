"""Stage 1, a run's inputs: model specs and their loading, devices, texts, token ids, and the run's
identity.
"""
