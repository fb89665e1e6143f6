import os

import pytest


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Tests never read or write the user's ~/.cache/pods."""
    monkeypatch.setenv("PODS_CACHE", str(tmp_path_factory.getbasetemp() / "pods-cache"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """An untrained, very small Qwen2 model + character tokenizer saved like a hub model."""
    from pods.models.tiny import TinyRecipe, build_model, build_tokenizer
    from pods.tasks.arithmetic import Arithmetic

    path = tmp_path_factory.mktemp("tiny-model")
    tokenizer = build_tokenizer(Arithmetic.alphabet)
    recipe = TinyRecipe(alphabet=Arithmetic.alphabet, hidden_size=32, layers=1, heads=2)
    build_model(recipe, tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class EvenStart:
    """Arithmetic prompts, but a reward an untrained model earns about half the time
    (the completion starts with a digit below 5), so groups have reward variance."""

    from pods.tasks.arithmetic import Arithmetic as _A

    name = "even_start"
    alphabet = _A.alphabet

    def __init__(self):
        self._inner = self._A()

    def train(self):
        return self._inner.train()

    def test(self):
        return self._inner.test()

    def reward(self, completion, problem):
        return 1.0 if completion[:1] in "01234" else 0.0


@pytest.fixture(autouse=True)
def _toy_task(monkeypatch):
    from pods.tasks import TASKS

    monkeypatch.setitem(TASKS, "even_start", EvenStart)
