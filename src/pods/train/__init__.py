"""The training loop: the step (``trainer``), selection, the update, checkpoints, data
parallelism, metrics and progress."""
