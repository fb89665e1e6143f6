from pods.tasks import TASKS, get_task
from pods.tasks.arithmetic import Arithmetic


def test_arithmetic_format_and_reward():
    task = Arithmetic()
    p = task.problem(7, 85)  # 7 + 85 = 092, written reversed
    assert (p.prompt, p.answer) == ("07+85=", "290")
    assert task.reward("290", p) == 1.0 and task.reward(" 290\n", p) == 1.0
    assert task.reward("092", p) == 0.0 and task.reward("", p) == 0.0
    assert task.reward("2900", p) == 0.0


def test_arithmetic_splits_are_deterministic_disjoint_and_unbiased():
    a, b = Arithmetic(), Arithmetic()
    assert a.train() == b.train() and a.test() == b.test()
    assert len(a.test()) == 1000 and len(a.train()) == 9000
    assert not {p.prompt for p in a.train()} & {p.prompt for p in a.test()}
    # every last digit of the sum appears in the test split (no structured hold-out)
    assert {p.answer[0] for p in a.test()} == set("0123456789")
    assert Arithmetic(seed=1).test() != a.test()


def test_registry():
    assert "arithmetic" in TASKS and get_task("arithmetic").name == "arithmetic"
