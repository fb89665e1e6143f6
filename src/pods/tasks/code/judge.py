"""Run a problem's tests against a model-written program so that only positive evidence
counts: a test passes when a party the program cannot reach says it passed.

Assert-style suites (MBPP, HumanEval) run in TWO sandboxes connected through this process:

    solution sandbox   setup + the program; then serves calls on its top-level names
    judge sandbox      setup + each test, the solution's names bound to proxies that call
                       across; after each test: {"op": "result", "i", "ok", "nonce"}

This process relays frames between them (pods.sandbox.pair), enforces the per-test deadline
and counts a test passed only from the judge's report carrying this run's secret nonce. The
program never sees the tests, the expected values or the nonce (another sandbox: its own
PID, mount and network namespaces), and what it returns reaches the tests only as plain
builtin values (pods.tasks.code.wire), so a lying ``__eq__`` cannot cross. Any exit of the
program, a crash, garbage on its channel or a missed deadline fails the test under way; the
remaining tests then run on a fresh pair (a program that never got ready fails them all).

LeetCode-style calls ("call" suites) need no judge sandbox: the solution sandbox serves
``Solution().<func>(*args)`` and this process compares the plain result with the expected
JSON, which never enters a sandbox.
"""

from __future__ import annotations

import json
import secrets
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from pods.sandbox import Limits
from pods.sandbox.pair import Channel, Relay
from pods.tasks.code import wire
from pods.tasks.code.data import Suite


@cache
def _program(entry: str) -> str:
    """wire.py's text followed by the call that makes it the solution or the judge."""
    return Path(wire.__file__).read_text() + f"\n\n{entry}()\n"


def _send(channel: Channel, message) -> None:
    channel.send(json.dumps(message).encode())


def _ready(relay: Relay, solution: Channel, deadline: float) -> bool:
    reply = relay.next_frame(solution, deadline)
    return reply is not None and _loads(reply) == {"ready": True}


def _loads(payload: bytes):
    try:
        return json.loads(payload)
    except (ValueError, RecursionError):
        return None


def _backstop(limits: Limits, cases: int) -> Limits:
    """A session's sandbox limits for ``cases`` cases: each case's time is a deadline kept
    here, so the sandbox's own (CPU) limit only backs up the whole session's, with one
    case's time to spare."""
    return replace(limits, timeout_s=limits.timeout_s * (cases + 1))


def assert_session(code: str, suite: Suite, limits: Limits, start: int,
                   results: list[bool]) -> int:
    """Run the assert ``suite``'s tests from ``start`` on one solution/judge pair, setting
    ``results[i]`` for each test the judge reported passed; returns where the next pair
    must start (len(tests) when done or when the program never got ready)."""
    tests, setup, timeout_s = list(suite.cases), suite.setup, limits.timeout_s
    nonce = secrets.token_hex(16)
    budget = _backstop(limits, len(tests) - start)
    with ExitStack() as stack:
        solution = stack.enter_context(Channel(_program("serve"), budget))
        judge = stack.enter_context(Channel(_program("judge"), budget, slot=1))
        _send(solution, {"setup": setup, "code": code})
        _send(judge, {"nonce": nonce, "setup": setup, "tests": tests[start:],
                      "names": list(suite.names), "start": start})
        relay = Relay([solution, judge])
        if not _ready(relay, solution, time.monotonic() + timeout_s):
            return len(tests)
        i, deadline = start, time.monotonic() + timeout_s
        while i < len(tests):
            payload = relay.next_frame(judge, deadline)
            message = _loads(payload) if payload is not None else None
            if not isinstance(message, dict):
                return i + 1
            if message.get("op") == "result":
                if message.get("nonce") != nonce or message.get("i") != i:
                    return i + 1
                results[i] = message.get("ok") is True
                i, deadline = i + 1, time.monotonic() + timeout_s
                continue
            solution.send(payload)  # a request: forwarded as it came, the judge made it
            reply = relay.next_frame(solution, deadline)
            if reply is None:
                return i + 1
            judge.send(reply)
    return len(tests)


def run_asserts(code: str, suite: Suite, limits: Limits, start: int = 0) -> tuple[bool, ...]:
    """Per test of the assert ``suite`` from ``start``: whether the judge reported it
    passed. ``suite.setup`` runs before the program and before the tests; ``suite.names``:
    the solution's names the tests call even where the setup defines them (HumanEval's
    entry point, whose stub the prompt holds). ``limits.timeout_s``: each test's time."""
    return _in_sessions(len(suite.cases), start, lambda at, results: assert_session(
        code, suite, limits, at, results))


def run_calls(code: str, suite: Suite, limits: Limits, start: int = 0,
              setup: str = "") -> tuple[bool, ...]:
    """Per (stdin lines of JSON arguments, expected JSON) case of the call ``suite`` from
    ``start``: whether ``Solution().<suite.func>(*args)`` returned the expected value,
    compared here as JSON would (tuples as lists), on one solution sandbox (a fresh one
    after a failure that ends it); ``setup`` runs before the program (the names LeetCode
    solutions use unimported). ``limits.timeout_s``: each case's time."""
    return _in_sessions(len(suite.cases), start, lambda at, results: _call_session(
        code, setup, suite, limits, at, results))


def _in_sessions(count: int, start: int, session) -> tuple[bool, ...]:
    """Outcomes of cases ``start..count-1``: ``session(at, results)`` runs cases from ``at``
    on fresh sandboxes, sets ``results[i]`` for those that passed and returns where the next
    session must start (a program that ended mid-way gets a fresh one)."""
    results, first = [False] * count, start
    while start < count:
        start = session(start, results)
    return tuple(results[first:])


def _call_session(code: str, setup: str, suite: Suite, limits: Limits, start: int,
                  results: list[bool]) -> int:
    cases, timeout_s = suite.cases, limits.timeout_s
    with Channel(_program("serve"), _backstop(limits, len(cases) - start)) as solution:
        _send(solution, {"setup": setup, "code": code})
        relay = Relay([solution])
        if not _ready(relay, solution, time.monotonic() + timeout_s):
            return len(cases)
        for i in range(start, len(cases)):
            stdin, expected = cases[i]
            try:
                args = [json.loads(line) for line in stdin.split("\n") if line.strip()]
            except ValueError:
                continue  # a malformed case fails, as it did when the program parsed it
            line = _Line(relay, solution, time.monotonic() + timeout_s)
            instance = _ask(line, "call", _Handle(("g", "Solution")))
            method = _ask(line, "getattr", instance, name=suite.func)
            got = _ask(line, "call", method, args=wire.encode(args), plain=True)
            if got is _ENDED:
                return i + 1
            results[i] = got is not _FAILED and _same_json(got, expected)
    return len(cases)


_ENDED, _FAILED = object(), object()


class _Handle(tuple):
    """An object the solution keeps, as a request's target."""


@dataclass(frozen=True)
class _Line:
    """Where a case's requests go, and by when their replies must be back."""

    relay: Relay
    solution: Channel
    deadline: float  # time.monotonic() at which the case fails


def _ask(line: _Line, op: str, target, plain=False, **fields):
    """One request's decoded value (a _Handle for an object the solution keeps, unless
    ``plain``); _FAILED if it raised or is not plain, _ENDED if the program ended or missed
    the deadline."""
    if target is _ENDED:
        return _ENDED
    if type(target) is not _Handle:
        return _FAILED
    if op == "call":
        fields.setdefault("args", [])
        fields.setdefault("kwargs", [])
    _send(line.solution, {"op": op, "target": list(target), **fields})
    reply = line.relay.next_frame(line.solution, line.deadline)
    if reply is None:
        return _ENDED
    message = _loads(reply)
    if not isinstance(message, dict) or set(message) != {"value"}:
        return _FAILED
    try:
        return wire.decode(message["value"], None if plain else lambda i: _Handle(("h", i)))
    except (wire.ProtocolError, ValueError, TypeError, RecursionError):
        return _FAILED


def _same_json(got, expected: str) -> bool:
    try:
        return json.loads(json.dumps(got)) == json.loads(expected)
    except (TypeError, ValueError, RecursionError):
        return False
