"""On a CPU whose cores other work keeps busy, pods runs fewer threads and says so
(pods.runtime.threads); a user's OMP_NUM_THREADS is kept."""

import torch

from pods.runtime import threads


def test_one_thread_a_core_the_other_work_leaves_free():
    assert [threads.threads_for(2, busy) for busy in (0.0, 0.4, 0.6, 1.4, 2.0)] == \
        [2, 2, 1, 1, 1]
    assert threads.threads_for(8, 3.0) == 5 and threads.threads_for(4, 7.0) == 1


def test_busy_cores_read_now_from_proc_stat():
    busy = threads.busy_cores(0.05)
    assert busy is None or 0.0 <= busy <= threads.usable_cores() + 1e-6


def test_a_busy_machine_gets_fewer_threads_and_a_line_saying_why(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("PODS_THREADS", raising=False)
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads, "busy_cores", lambda interval=0.25: 1.9)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    said = []
    try:
        assert threads.choose_threads(said.append) == 1
        assert "other work keeps 1.9 of the 2 cores pods may use busy, so torch runs 1 " \
            "thread instead of 2" in said[0] and "OMP_NUM_THREADS" in said[0]
        monkeypatch.setattr(threads, "busy_cores", lambda interval=0.25: 0.1)
        assert threads.choose_threads(said.append) is None and len(said) == 1  # idle
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's choice stands
        monkeypatch.setattr(threads, "busy_cores", lambda interval=0.25: 1.9)
        assert threads.choose_threads(said.append) is None
    finally:
        torch.set_num_threads(before)
