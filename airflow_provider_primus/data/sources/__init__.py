"""Adapters that resolve a logical source into physical partitions (tier 2)."""
