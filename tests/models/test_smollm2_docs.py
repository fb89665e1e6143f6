"""The documentation's examples marked "Needs SmolLM2", run as written on the fetched
SmolLM2-135M-Instruct (tests/test_docs.py skips them: its model is an untrained tiny one).

The same policy as tests/test_docs.py, with budgets for a real model on a CPU: ``pods
train`` and ``pods compare`` get 2 steps of P=1, n=2, m=2 and 8 new tokens, the hf engine and
2 test problems; ``pods eval`` 2 problems, one repeat and 8 new tokens. Later flags win, so
each command runs its own settings otherwise (its model, task, dtype, LoRA, data)."""

import pytest

from doc_examples import SMOLLM2, examples, run_shell

# pytest-xdist: on one worker, in turn (the model is fetched once a worker)
pytestmark = pytest.mark.xdist_group("smollm2")

CHEAP = ("--max-steps 2 --prompts-per-step 1 --n 2 --m 2 --max-new-tokens 8 --engine hf "
         "--eval-size 2 --eval-every 1e9 --checkpoint-every 1e9 --progress false")
CHEAP_EVAL = "--eval-size 2 --repeats 1 --max-new-tokens 8"
MARKED = [pytest.param(code, id=name) for name, kind, code, needs in examples()
          if needs and needs.startswith(SMOLLM2) and kind == "shell"]


@pytest.mark.parametrize("code", MARKED)
def test_example_runs_on_the_model(code, offline, tmp_path):
    run_shell(code, tmp_path, "smollm2", CHEAP, CHEAP_EVAL)
