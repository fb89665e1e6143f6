"""The run folder's format, below everything that reads or writes it: where checkpoints
sit and how they are published and found (``checkpoints``), and metrics.jsonl
(``metrics``). What a checkpoint holds is the trainer's (pods.train.checkpoint)."""
