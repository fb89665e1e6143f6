import numpy as np
import pytest
import torch

from pods.evaluation import Sampling, eval_slice, evaluate, scores, summarize
from pods.rollout import HFEngine
from pods.tasks import Problem, Task


class Exact(Task):
    """Reward 1 for the exact answer; the layout is "starts with a digit"."""

    def reward(self, completion, problem):
        return float(completion == problem.answer)

    def format_ok(self, completion):
        return completion[:1].isdigit()


def test_metrics_per_repeat_mean_and_sem():
    problems = [Problem("a", "1"), Problem("b", "2")]
    # rows: problem 0 repeat 0, problem 0 repeat 1, problem 1 repeat 0, problem 1 repeat 1
    texts = ["1", "x", "2", "2"]
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1]])
    names, values = scores(Exact(), problems, texts, mask, repeats=2)  # [2, 2, metrics]
    m = {name: values[:, :, k].mean(0).numpy() for k, name in enumerate(names)}
    # repeat 0: both correct -> 1.0; repeat 1: only problem 1 -> 0.5
    np.testing.assert_allclose(m["accuracy"], [1.0, 0.5])
    np.testing.assert_allclose(m["format_accuracy"], [1.0, 0.5])  # "x" has no digit
    np.testing.assert_allclose(m["both_accuracy"], [1.0, 0.5])
    np.testing.assert_allclose(m["completion_len"], [(2 + 3) / 2, (1 + 3) / 2])
    result = summarize(names, values)
    assert result["eval/accuracy"] == pytest.approx(0.75)
    assert result["eval/accuracy_sem"] == pytest.approx(np.std([1.0, 0.5], ddof=1) / 2**0.5)


def test_evaluate_reports_sem_over_repeats(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    engine = HFEngine(model, tokenizer, chunk=64)
    problems = [Problem("1+2=", "3"), Problem("4+4=", "8"), Problem("5+1=", "6")]
    result = evaluate(engine, Exact(), problems, Sampling(1.0, 3, repeats=4))
    assert result["eval/repeats"] == 4 and result["eval/problems"] == 3
    for key in ("accuracy", "format_accuracy", "both_accuracy", "completion_len"):
        assert f"eval/{key}" in result and f"eval/{key}_sem" in result
    single = evaluate(engine, Exact(), problems, Sampling(0.0, 3))
    assert "eval/accuracy_sem" not in single
    # evaluation never moves the caller's RNG
    state = torch.get_rng_state()
    evaluate(engine, Exact(), problems, Sampling(1.0, 3, repeats=2))
    assert torch.equal(state, torch.get_rng_state())


def test_eval_argument_errors():
    from pods.cli.evaluate import EvalRequest

    with pytest.raises(ValueError, match="--repeats must be >= 1"):
        EvalRequest("nowhere", ("arithmetic",), repeats=0)


def test_the_evaluated_slice_starts_at_the_offset():
    problems = [Problem(prompt=str(i), answer=str(i)) for i in range(10)]
    assert eval_slice(problems, 0, 4) == problems[:4]
    assert eval_slice(problems, 6, 4) == problems[6:]
    assert eval_slice(problems, 8, 4) == problems[8:]  # what is left
    assert eval_slice(problems, 3, None) == problems[3:]
    assert eval_slice([], 0, 5) == []  # no offset: the split as it is, even empty
    with pytest.raises(ValueError, match="eval_offset=10 leaves no test problems: the test "
                                         "split has 10"):
        eval_slice(problems, 10, None)


def test_each_test_set_takes_its_own_completion_length_in_any_order():
    """A language model evaluated on gsm8k and humaneval: 512 and 1024 new tokens (the
    recipe's by task), whichever --task comes first; --max-new-tokens sets them all."""
    from pods.cli.evaluate import EvalRequest, _new_tokens
    from pods.config import from_dict

    for tasks in (("gsm8k", "humaneval"), ("humaneval", "gsm8k")):
        request = EvalRequest("Qwen/Qwen2.5-0.5B-Instruct", tasks)
        cfg = from_dict({"model": request.path, "task": tasks[0]})
        assert {t: _new_tokens(t, cfg, request) for t in tasks} == \
            {"gsm8k": 512, "humaneval": 1024}
    request = EvalRequest("Qwen/Qwen2.5-0.5B-Instruct", ("gsm8k", "humaneval"),
                          fields={"max_new_tokens": 300})
    cfg = from_dict({"model": request.path, "task": "gsm8k", "max_new_tokens": 300})
    assert {_new_tokens(t, cfg, request) for t in ("gsm8k", "humaneval")} == {300}
