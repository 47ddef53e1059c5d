"""Model training: the runtime and its update step, the DLRM model and its optimizer pair, metrics;
the stream (``stream/``), the feeds and their mixing (``feeds/``), checkpoints and snapshots
(``checkpoints/``)."""
