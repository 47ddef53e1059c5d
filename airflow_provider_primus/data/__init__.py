"""The data layer: logical sources (spec/) → physical partitions → executable tasks (the task graph)."""
