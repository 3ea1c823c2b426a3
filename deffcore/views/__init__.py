"""Stage 6, a run as it is shown: run views of live or shared runs, labels, notebook HTML, the
paper's values, words.
"""
