"""The data service: a dispatcher leasing tasks, data executors serving transformed Arrow batches over
Flight with credit-based flow control, and the trainer-side loader that acknowledges what it consumed."""
