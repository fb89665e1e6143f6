"""`pods` with the tests' toy task registered, for tests that launch it with torchrun;
``TEST_HOST_BYTES`` in the environment: the machine's available memory that pods reads
(pods.train.micro_batch.host_available_bytes), to make it choose as on a smaller one."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from pods.cli import main  # noqa: E402
from pods.tasks import TASKS  # noqa: E402
from toy_task import EvenStart  # noqa: E402

TASKS["even_start"] = EvenStart
if "TEST_HOST_BYTES" in os.environ:
    from pods.train import micro_batch

    micro_batch.host_available_bytes = lambda: int(os.environ["TEST_HOST_BYTES"])
sys.exit(main())
