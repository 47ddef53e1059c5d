"""Model training: the DLRM model, its sparse/dense optimizer pair and evaluation metrics."""
