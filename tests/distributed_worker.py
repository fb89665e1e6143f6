"""`pods` with the tests' toy task registered, for tests that launch it with torchrun."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from pods.cli import main  # noqa: E402
from pods.tasks import TASKS  # noqa: E402
from toy_task import EvenStart  # noqa: E402

TASKS["even_start"] = EvenStart
sys.exit(main())
