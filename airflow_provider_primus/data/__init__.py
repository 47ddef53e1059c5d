"""The data layer: logical sources (contracts/) → physical partitions → executable tasks (the task graph)."""
