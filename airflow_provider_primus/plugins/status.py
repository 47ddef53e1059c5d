"""What the pages read of a stored job status: the defensive lookups (``lookup.py``, shared with
the core) and the labels that tie jobs together on a page."""

from __future__ import annotations

from airflow_provider_primus.lookup import as_map, dig, num

__all__ = ["BASELINE_LABEL", "as_map", "dig", "num"]

# A job carrying this label (its value: another job's name) is that job's baseline: the other job's
# page compares their stream AUCs (a batch-only shadow beside a mixed model, say).
BASELINE_LABEL = "primus.dev/baseline-for"
