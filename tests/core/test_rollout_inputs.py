"""The per-rollout inputs of the rules: computed from the completions, by name, once."""

import pytest
import torch

from pods.core.downsample import RULES, downsample, rule_needs
from pods.core.rollout_inputs import ROLLOUT_INPUTS, SOURCES, rule_inputs, rule_sources

MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]])  # [4, T]
IDS = torch.tensor([[5, 5, 5, 0], [7, 0, 0, 0], [1, 2, 3, 4], [9, 8, 0, 0]])


def test_every_input_a_builtin_rule_needs_is_defined_and_reads_known_sources():
    for name in RULES:
        assert set(rule_sources(name)) <= set(SOURCES)
        assert set(rule_needs(name)) <= set(ROLLOUT_INPUTS)
    assert rule_sources("max_variance") == ()
    assert rule_sources("shortest") == ("completion_mask",)


def test_lengths_are_the_completion_token_counts():
    assert rule_inputs("max_variance", completion_mask=MASK) == {}
    inputs = rule_inputs("shortest", completion_ids=IDS, completion_mask=MASK)
    assert inputs["lengths"].tolist() == [3, 1, 4, 2]
    idx = downsample(torch.zeros(1, 4), 2, "shortest", lengths=inputs["lengths"].view(1, 4))
    assert idx.tolist() == [[1, 3]]  # the two shortest


def test_a_new_input_needs_one_function_and_a_rule_that_names_it(monkeypatch):
    def distinct_tokens(completion_ids, completion_mask):  # [rows]
        return torch.tensor([len(set(i[m.bool()].tolist()))
                             for i, m in zip(completion_ids, completion_mask, strict=True)])

    def most_varied(rewards, m, generator, *, distinct_tokens):
        return distinct_tokens.topk(m, dim=1).indices

    most_varied.needs = ("distinct_tokens",)
    monkeypatch.setitem(ROLLOUT_INPUTS, "distinct_tokens", distinct_tokens)
    assert rule_sources(most_varied) == ("completion_ids", "completion_mask")
    inputs = rule_inputs(most_varied, completion_ids=IDS, completion_mask=MASK)
    assert inputs["distinct_tokens"].tolist() == [1, 1, 4, 2]
    grid = {k: v.view(1, 4) for k, v in inputs.items()}
    assert downsample(torch.zeros(1, 4), 2, most_varied, **grid).tolist() == [[2, 3]]


def test_unknown_inputs_and_missing_sources_are_refused_before_any_work():
    def odd(rewards, m, generator, *, colour):
        return rewards.topk(m, dim=1).indices

    odd.needs = ("colour",)
    with pytest.raises(ValueError, match="rule 'odd' needs 'colour', which is not a "
                       "per-rollout input; define it in pods.core.rollout_inputs"):
        rule_sources(odd)
    with pytest.raises(ValueError, match="'lengths' is computed from completion_mask; "
                       "pass completion_mask"):
        rule_inputs("shortest", completion_ids=IDS)
    with pytest.raises(ValueError, match="unknown rule 'nope'"):
        rule_sources("nope")


def test_an_input_reading_something_else_is_refused(monkeypatch):
    monkeypatch.setitem(ROLLOUT_INPUTS, "lengths", lambda texts: texts)
    with pytest.raises(ValueError, match="'lengths' reads texts; its function's parameters "
                       "must be among completion_ids, completion_mask"):
        rule_sources("shortest")
