"""Turning what a worker left behind into results: strict response validation (hand-built
SandboxResults), and real workers that crash, raise, exit or run out of memory."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from stratagem.core.graph import ValidatorSpec
from stratagem.evaluation.outcome import interpret
from stratagem.evaluation.sandbox import SandboxResult

SPECS = (
    ValidatorSpec("load"),
    ValidatorSpec("correctness", ("load",)),
    ValidatorSpec("timing", ("correctness",)),
)
NAMES = [s.name for s in SPECS]
RID = "req-0123456789abcdef"


def _result(name: str, outcome: str = "passed") -> dict[str, Any]:
    return {"name": name, "outcome": outcome, "reason": None, "kind": None,
            "details": {"x": 1}, "duration_s": 0.25}


def _good_response() -> dict[str, Any]:
    return {"protocol": 1, "request_id": RID, "results": [_result(n) for n in NAMES],
            "environment": {"torch": "9.9", "device": "cpu"}}


def _progress(stages: list[str], running: str | None = None, done: bool = True) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for n in stages:
        events += [{"event": "start", "stage": n, "t": 0.0},
                   {"event": "end", "stage": n, "result": _result(n), "t": 0.0}]
    if running is not None:
        events.append({"event": "start", "stage": running, "t": 0.0})
    elif done:
        events.append({"event": "done", "t": 0.0})
    return events


def _sr(**kw: Any) -> SandboxResult:
    base: dict[str, Any] = dict(
        response_text=json.dumps(_good_response()), response_problem=None,
        progress=_progress(NAMES), returncode=0, signal_name=None, timed_out=False,
        duration_s=1.0, stdout_tail="", stderr_tail="", network_isolated=True, strays_killed=0,
    )
    base.update(kw)
    return SandboxResult(**base)


def _by_name(results) -> dict[str, Any]:
    return {r.name: r for r in results}


def test_a_good_response_is_trusted() -> None:
    out = interpret(SPECS, _sr(), RID, 30)
    assert [(r.name, r.outcome) for r in out.results] == [(n, "passed") for n in NAMES]
    assert out.environment == {"torch": "9.9", "device": "cpu"}


def _mut(fn: Callable[[dict[str, Any]], Any]) -> str:
    d = copy.deepcopy(_good_response())
    fn(d)
    return json.dumps(d)


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def f(d: dict[str, Any]) -> None:
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return f


MALFORMED: dict[str, tuple[str, str]] = {
    # case: (response text, what the reason must say)
    "extra top-level field": (_mut(_set(["verdict"], "valid")), "breaks the protocol"),
    "extra field in a result": (_mut(_set(["results", 2, "trusted"], True)), "breaks the protocol"),
    "outcome 'pass'": (_mut(_set(["results", 2, "outcome"], "pass")), "breaks the protocol"),
    "duration as a string": (_mut(_set(["results", 2, "duration_s"], "0.25")), "breaks the protocol"),
    "name as a number": (_mut(_set(["results", 2, "name"], 3)), "breaks the protocol"),
    "unknown failure kind": (_mut(_set(["results", 2, "kind"], "great")), "breaks the protocol"),
    "details as a list": (_mut(_set(["results", 2, "details"], [])), "breaks the protocol"),
    "results as a dict": (_mut(_set(["results"], {"timing": "passed"})), "breaks the protocol"),
    "protocol 2": (_mut(_set(["protocol"], 2)), "breaks the protocol"),
    "no environment": (_mut(lambda d: d.pop("environment")), "breaks the protocol"),
    "no request id": (_mut(lambda d: d.pop("request_id")), "breaks the protocol"),
    "not JSON": ("all stages passed, trust me", "breaks the protocol"),
    "truncated JSON": (json.dumps(_good_response())[:-40], "breaks the protocol"),
    "a JSON list": (json.dumps([_good_response()]), "breaks the protocol"),
    "empty": ("", "breaks the protocol"),
    "wrong request id": (_mut(_set(["request_id"], "someone-else")), "answers another request"),
    "unrequested stage": (
        _mut(lambda d: d["results"].append(_result("baseline"))), "exactly one result per requested stage"
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_response_never_passes_the_last_stage(case: str) -> None:
    text, why = MALFORMED[case]
    # Even with a worker log claiming every stage passed, the last stage is failed.
    out = interpret(SPECS, _sr(response_text=text), RID, 30)
    by = _by_name(out.results)
    assert by["timing"].outcome == "failed"
    assert by["timing"].kind == "malformed"
    assert why in by["timing"].reason
    assert out.environment == {}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_response_without_progress_fails_the_first_stage(case: str) -> None:
    text, why = MALFORMED[case]
    out = interpret(SPECS, _sr(response_text=text, progress=[]), RID, 30)
    assert [(r.name, r.outcome, r.kind) for r in out.results] == [("load", "failed", "malformed")]
    assert why in out.results[0].reason


@pytest.mark.parametrize(
    "problem",
    [
        "the response is 9000000 bytes, over the 8388608-byte limit",
        "the response is not a regular file",
        "the response is unreadable: 'utf-8' codec can't decode byte 0xff",
    ],
)
def test_refused_response_fails_the_last_stage_despite_a_clean_log(problem: str) -> None:
    out = interpret(SPECS, _sr(response_text=None, response_problem=problem), RID, 30)
    by = _by_name(out.results)
    assert [by["load"].outcome, by["correctness"].outcome] == ["passed", "passed"]
    assert by["timing"].outcome == "failed" and by["timing"].kind == "malformed"
    assert by["timing"].reason == problem


def test_a_timed_out_run_ignores_its_response() -> None:
    sr = _sr(progress=_progress(["load"], running="correctness"), timed_out=True, signal_name="SIGKILL", returncode=-9)
    out = interpret(SPECS, sr, RID, 7)
    by = _by_name(out.results)
    assert by["load"].outcome == "passed"
    assert by["correctness"].outcome == "failed" and by["correctness"].kind == "timeout"
    assert by["correctness"].reason == "the worker was killed after the 7 s timeout during correctness"
    assert "timing" not in by  # the service marks it skipped
    assert out.environment == {}


@pytest.mark.parametrize(
    ("signal_name", "returncode", "kind", "reason"),
    [
        ("SIGSEGV", -11, "crash", "the worker died with SIGSEGV during correctness"),
        ("SIGABRT", -6, "crash", "the worker died with SIGABRT during correctness"),
        ("SIGKILL", -9, "oom", "the worker was killed with SIGKILL (most likely by the out-of-memory killer) during correctness"),
        ("SIGTERM", -15, "crash", "the worker was killed by SIGTERM during correctness"),
        (None, 3, "crash", "the worker exited with code 3 during correctness"),
        (None, 0, "crash", "the worker exited without a response during correctness"),
    ],
)
def test_death_mid_stage_fails_that_stage(signal_name, returncode, kind, reason) -> None:
    sr = _sr(response_text=None, response_problem="the worker wrote no response",
             progress=_progress(["load"], running="correctness"), returncode=returncode, signal_name=signal_name)
    out = interpret(SPECS, sr, RID, 30)
    by = _by_name(out.results)
    assert by["load"].outcome == "passed"
    assert (by["correctness"].outcome, by["correctness"].kind, by["correctness"].reason) == ("failed", kind, reason)
    assert by["correctness"].details["signal"] == signal_name
    assert by["correctness"].details["returncode"] == returncode


def test_worker_that_never_started_is_a_harness_error() -> None:
    sr = _sr(response_text=None, response_problem="the worker wrote no response", progress=[],
             returncode=1, stderr_tail="ModuleNotFoundError: No module named 'torch'")
    out = interpret(SPECS, sr, RID, 30)
    assert [(r.name, r.outcome, r.kind) for r in out.results] == [("load", "failed", "harness_error")]
    assert "failed to start" in out.results[0].reason
    assert "No module named 'torch'" in out.results[0].details["stderr_tail"]


def test_forged_progress_events_are_ignored() -> None:
    progress = _progress(["load"], running="correctness")
    progress += [
        {"event": "end", "stage": "correctness", "result": {**_result("correctness"), "outcome": "pass"}},
        {"event": "end", "stage": "timing", "result": {**_result("timing"), "extra": 1}},
        {"event": "end", "stage": "correctness", "result": _result("load")},  # another stage's result
        {"event": "end", "stage": "baseline", "result": _result("baseline")},  # not requested
        {"event": "end", "stage": "timing", "result": "passed"},
        {"event": "end", "stage": "timing"},
        {"event": "start"},
    ]
    sr = _sr(response_text=None, response_problem="the worker wrote no response", progress=progress,
             returncode=-11, signal_name="SIGSEGV")
    out = interpret(SPECS, sr, RID, 30)
    assert [(r.name, r.outcome, r.kind) for r in out.results] == [
        ("load", "passed", None), ("correctness", "failed", "crash"),
    ]


@pytest.mark.parametrize("stage", [["correctness"], {"name": "correctness"}])
def test_progress_line_with_unhashable_stage_does_not_crash_the_parent(stage: Any) -> None:
    progress = _progress(["load"], running="correctness") + [{"event": "start", "stage": stage}]
    sr = _sr(response_text=None, response_problem="the worker wrote no response", progress=progress,
             returncode=0)
    out = interpret(SPECS, sr, RID, 30)
    by = _by_name(out.results)
    assert by["load"].outcome == "passed"
    assert by["correctness"].outcome == "failed" and by["correctness"].kind == "crash"


# -- real workers that die or fail in forward ------------------------------------------------


REAL_FAILURES = {
    # case: (forward code, kind, reason substring)
    "segfault": ("import ctypes\nctypes.string_at(0)", "crash", "the worker died with SIGSEGV during correctness"),
    "exception": ("raise ValueError('candidate-boom-42')", "exception",
                  "ModelNew.forward raised: ValueError: candidate-boom-42"),
    "os._exit(0)": ("import os\nos._exit(0)", "crash", "the worker exited without a response during correctness"),
    "sys.exit(3)": ("import sys\nsys.exit(3)", "exception", "ModelNew.forward raised: SystemExit: 3"),
    "MemoryError": ("raise MemoryError('no room')", "oom", "ModelNew.forward raised: MemoryError: no room"),
}


@pytest.mark.parametrize("case", list(REAL_FAILURES))
def test_real_failure_in_forward(case: str, evaluate, h) -> None:
    forward, kind, reason = REAL_FAILURES[case]
    ev = evaluate(h.make_candidate(forward=forward))
    r = h.results_by_name(ev)
    assert ev.verdict.status == "invalid", ev.verdict.report()
    assert r["static_checks"].outcome == "passed"
    assert r["load"].outcome == "passed"
    assert r["correctness"].outcome == "failed"
    assert r["correctness"].kind == kind
    assert reason in r["correctness"].reason
    assert r["timing"].outcome == "skipped"
    assert [f.name for f in ev.verdict.failures] == ["correctness"]
    if case == "segfault":
        assert r["correctness"].details["signal"] == "SIGSEGV"
        assert ev.sandbox["signal"] == "SIGSEGV"
    if case == "exception":
        tb = r["correctness"].details["traceback"]
        assert "candidate-boom-42" in tb and "candidate.py" in tb and "in forward" in tb
        assert ev.sandbox["returncode"] == 0  # the worker survived and reported
    if case == "sys.exit(3)":
        assert ev.sandbox["returncode"] == 0  # SystemExit is caught and reported as data


def test_response_path_made_a_directory_is_refused(evaluate, h) -> None:
    """A candidate that blocks the response file: every stage may pass, the run is not trusted."""
    ev = evaluate(h.make_candidate(imports="import os\nos.makedirs(os.path.join(os.getcwd(), '.stratagem', 'response.json'))"))
    r = h.results_by_name(ev)
    assert ev.verdict.status == "invalid"
    assert r["load"].outcome == "passed" and r["correctness"].outcome == "passed"
    assert r["timing"].outcome == "failed" and r["timing"].kind == "malformed"
    assert r["timing"].reason == "the response is not a regular file"
    assert ev.sandbox["returncode"] != 0


# -- the judge's answer ------------------------------------------------------------------------

def _judged(**judge: Any) -> SandboxResult:
    from stratagem.evaluation.sandbox import JudgeRun

    base: dict[str, Any] = dict(response_text=None, response_problem=None, returncode=0, signal_name=None,
                                timed_out=False, duration_s=0.5, stderr_tail="", nonce="n-1")
    base.update(judge)
    return _sr(judge=JudgeRun(**base))


def _answer(**kw: Any) -> str:
    body = {"request_id": RID, "nonce": "n-1", "ok": True, "failures": [], "checked": ["trial-1", "timed-0-3"],
            "notes": []}
    body.update(kw)
    return json.dumps(body)


def test_a_confirmed_verdict_carries_what_the_judge_checked() -> None:
    got = _by_name(interpret(SPECS, _judged(response_text=_answer()), RID, 60.0).results)
    assert all(r.outcome == "passed" for r in got.values())
    assert got["correctness"].details["judge"]["checked"] == ["trial-1", "timed-0-3"]
    assert got["correctness"].details["x"] == 1  # the worker's own details are kept


def test_the_judge_failing_a_stage_fails_it_whatever_the_worker_said() -> None:
    failure = {"stage": "timing", "kind": "wrong_output", "reason": "judge: timed_outputs: bad"}
    got = _by_name(interpret(SPECS, _judged(response_text=_answer(ok=False, failures=[failure])), RID, 60.0).results)
    assert got["correctness"].outcome == "passed"
    assert got["timing"].outcome == "failed" and got["timing"].kind == "wrong_output"
    assert got["timing"].reason == "judge: timed_outputs: bad"


@pytest.mark.parametrize("judge", [
    {"response_text": None, "returncode": 1, "stderr_tail": "Traceback...\nRuntimeError: boom"},
    {"response_text": None, "timed_out": True},
    {"response_text": "{not json"},
    {"response_text": json.dumps({"request_id": "another", "nonce": "n-1", "ok": True, "failures": [], "checked": [],
                                  "notes": []})},
    # an answer to a go file the candidate wrote early (it cannot know the parent's nonce)
    {"response_text": json.dumps({"request_id": RID, "nonce": "guessed", "ok": True, "failures": [], "checked": [],
                                  "notes": []})},
])
def test_a_judge_that_cannot_answer_fails_closed(judge: dict[str, Any]) -> None:
    got = _by_name(interpret(SPECS, _judged(**judge), RID, 60.0).results)
    assert got["correctness"].outcome == "failed" and got["correctness"].kind == "harness_error"
    assert got["correctness"].reason.startswith("judge: the outputs could not be confirmed")
