"""What a run says once its data is read: the prompts dropped, and how the update cuts its
passes (a token budget below the longest prompt + 1 refused before any training)."""

import pytest
import torch
from transformers import AutoTokenizer

from pods.config import from_dict
from pods.models.tiny import shipped_model_path
from pods.tasks import get_task
from pods.train.start import data_notes

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def notes(device=CPU, **fields) -> list[str]:
    config = from_dict(fields)
    tokenizer = AutoTokenizer.from_pretrained(shipped_model_path())
    task = get_task(config.task.name, config.task, 0)
    return data_notes(config, {"data/dropped_train": 0, "data/dropped_test": 0}, device,
                      (tokenizer, task, task.train()))


def test_each_micro_batch_setting_is_said():
    assert notes() == ["micro-batch: all 128 kept rows a step in one pass (--micro-batch-size "
                       "or --micro-batch-tokens cut it)"]
    assert notes(micro_batch_size=4) == ["micro-batch: 4 rows a pass (--micro-batch-size) of "
                                         "the 128 kept a step"]
    assert notes(CUDA)[0].startswith("micro-batch: chosen from the GPU's free memory at the "
                                     "first update")
    [line] = notes(micro_batch_tokens=64)
    assert line.startswith("micro-batch: at most 64 token positions a pass "
                           "(--micro-batch-tokens; the longest prompt is ")


def test_a_token_budget_below_the_longest_prompt_is_refused():
    with pytest.raises(ValueError, match=r"micro_batch_tokens=3 is below the longest training "
                                         r"prompt \+ 1 = \d+ tokens.*raise it to"):
        notes(micro_batch_tokens=3)
    longest = int(notes(micro_batch_tokens=64)[0].rsplit(" ", 1)[1].rstrip(")"))
    assert notes(micro_batch_tokens=longest + 1)  # the smallest budget that holds it
    with pytest.raises(ValueError, match="below the longest"):
        notes(micro_batch_tokens=longest)


def test_dropped_prompts_are_said():
    config = from_dict({})
    tokenizer = AutoTokenizer.from_pretrained(shipped_model_path())
    task = get_task(config.task.name, config.task, 0)
    lines = data_notes(config, {"data/dropped_train": 3, "data/dropped_test": 1}, CPU,
                       (tokenizer, task, task.train()))
    assert lines[0] == "dropped prompts over 512 tokens: 3 train, 1 test"
