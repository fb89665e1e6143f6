"""Where a process runs: its device (``device``), its rank among the others and the
collectives they share (``distributed``), and the model sharded over them (``fsdp``).
The trainer, evaluation and ``pods check`` all take these from here."""
