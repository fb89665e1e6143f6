"""A toy task for tests (also registered by distributed_worker.py in launched processes)."""


from pods.tasks import Task


class EvenStart(Task):
    """Arithmetic prompts, but a reward an untrained model earns about half the time
    (the completion starts with a digit below 5), so groups have reward variance."""

    from pods.tasks.arithmetic import Arithmetic as _A

    name = "even_start"
    alphabet = _A.alphabet

    def __init__(self, config=None, seed=0):
        self._inner = self._A()

    def train(self):
        return self._inner.train()

    def test(self):
        return self._inner.test()

    def reward(self, completion, problem):
        return 1.0 if completion[:1] in "01234" else 0.0
