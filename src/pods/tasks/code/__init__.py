"""Code tasks: LiveCodeBench, MBPP and HumanEval (``tasks``), read from the hub or local files
in the hub's row formats (``data``); model-written programs run in ``pods.sandbox``."""
