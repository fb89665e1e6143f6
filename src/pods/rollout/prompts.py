"""From a task's problems to the text the model continues.

With a chat template (instruct models) the task's system prompt and the problem become
messages rendered by ``tokenizer.apply_chat_template`` with the generation prompt appended;
the template already holds any special tokens, so encoding must not add them again. Without
one (base models, the embedded tiny model) the system prompt, if any, precedes the problem.
"""

from __future__ import annotations

from pods.tasks import Problem


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def render_prompts(tokenizer, task, problems: list[Problem]) -> tuple[list[str], bool]:
    """(texts, add_special_tokens): the prompts, and whether encoding them should add the
    tokenizer's special tokens (False when a chat template already placed them)."""
    system = task.system_prompt
    if not has_chat_template(tokenizer):
        return [f"{system}\n{p.prompt}" if system else p.prompt for p in problems], True
    texts = []
    for p in problems:
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": p.prompt})
        texts.append(tokenizer.apply_chat_template(messages, tokenize=False,
                                                   add_generation_prompt=True))
    return texts, False


def encoded_prompts(tokenizer, task, problems: list[Problem]) -> list[list[int]]:
    """The problems' rendered prompts as token ids."""
    texts, special = render_prompts(tokenizer, task, problems)
    return tokenizer(texts, add_special_tokens=special)["input_ids"]


def drop_long_prompts(tokenizer, task, problems: list[Problem],
                      max_tokens: int) -> tuple[list[Problem], int]:
    """The problems whose rendered prompt fits in ``max_tokens`` tokens, and how many were
    dropped (the paper drops prompts over 512 tokens)."""
    lengths = [len(ids) for ids in encoded_prompts(tokenizer, task, problems)]
    kept = [p for p, n in zip(problems, lengths, strict=True) if n <= max_tokens]
    return kept, len(problems) - len(kept)


def fitting_splits(tokenizer, task, max_tokens: int) -> tuple[list, list, dict[str, int]]:
    """The task's train and test problems whose prompts fit ``max_tokens``, and how many of
    each were dropped (``data/dropped_train``, ``data/dropped_test``)."""
    train, dropped_train = drop_long_prompts(tokenizer, task, task.train(), max_tokens)
    test, dropped_test = drop_long_prompts(tokenizer, task, task.test(), max_tokens)
    if not train:
        raise ValueError(f"no training prompt fits in max_prompt_tokens={max_tokens}; "
                         f"raise it.")
    return train, test, {"data/dropped_train": dropped_train, "data/dropped_test": dropped_test}
