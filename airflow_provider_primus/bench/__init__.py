"""Benchmarks behind ``primus bench``: each prints one JSON line of measured figures and ratios."""
