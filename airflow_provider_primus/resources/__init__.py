"""Resources: the executor contract (``backend.py``), its backends, telemetry and the autoscaler."""
