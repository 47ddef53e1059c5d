"""Synthetic data for demos, tests and benchmarks.

Generated rather than downloaded so every run is offline and reproducible from a seed, and so the
properties a benchmark depends on (drift, cold start, label delay) are known and tunable instead of
whatever a public data set happens to have.
"""
