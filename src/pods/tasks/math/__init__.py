"""Math tasks: GSM8K, MATH (test: MATH-500) and AMC23 (``tasks``), the answer grader built on
math-verify (``grader``) and the paper's rewards: correctness plus format bonuses
(``rewards``)."""
