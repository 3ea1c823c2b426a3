"""Stage 10, work beyond one run: the background jobs of the app and sweeps over grids of runs
(Ray).
"""
