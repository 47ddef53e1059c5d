"""What outlives a trainer: checkpoints (local files, row-wise shards, object stores and HDFS), their
resumption by a group of another size, savepoints the master asks for, and published snapshots."""
