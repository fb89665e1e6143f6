"""Models: loading a policy (hub id, folder or the embedded model) with its dtype and LoRA
(``policy``), the embedded tiny model (``tiny``) and its supervised warm-up (``warmup``),
and writing a checkpoint as a standalone model (``export``)."""
