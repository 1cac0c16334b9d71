"""Verdicts: status from validator results, and the failure report an agent reads."""

from __future__ import annotations

import pytest

from stratagem.core.verdict import ERROR_KINDS, ValidatorResult, Verdict


def ok(name: str) -> ValidatorResult:
    return ValidatorResult(name=name, outcome="passed")


def bad(name: str, kind: str, reason: str = "boom") -> ValidatorResult:
    return ValidatorResult(name=name, outcome="failed", kind=kind, reason=reason)  # type: ignore[arg-type]


def skip(name: str, reason: str = "needs x") -> ValidatorResult:
    return ValidatorResult(name=name, outcome="skipped", reason=reason)


def test_all_passed_is_valid():
    v = Verdict((ok("static_checks"), ok("load"), ok("correctness")))
    assert v.status == "valid"
    assert v.failures == ()
    assert v.report() == "All validators passed."


@pytest.mark.parametrize(
    "kind", ["rejected", "malformed", "compile_error", "exception", "wrong_output", "timeout",
             "crash", "oom", "cuda_error"]
)
def test_candidate_failure_kinds_are_invalid(kind):
    v = Verdict((ok("load"), bad("correctness", kind), skip("timing")))
    assert v.status == "invalid"


@pytest.mark.parametrize("kind", ["problem_error", "harness_error"])
def test_problem_and_harness_errors_make_the_verdict_error(kind):
    assert Verdict((bad("load", kind),)).status == "error"
    # an error kind wins even when a candidate failure came first
    assert Verdict((bad("static_checks", "malformed"), bad("load", kind))).status == "error"


def test_error_kinds_constant():
    assert ERROR_KINDS == {"problem_error", "harness_error"}


def test_skipped_without_failure_is_not_valid():
    # A validator that never ran cannot vouch for the candidate.
    assert Verdict((ok("load"), skip("timing", "worker vanished"))).status == "invalid"


def test_report_lists_every_failure_and_the_skipped():
    v = Verdict(
        results=(
            bad("static_checks", "malformed", "no ModelNew"),
            ok("other"),
            bad("lint", "rejected", "uses torch.compile"),
            skip("load"),
            skip("correctness"),
        )
    )
    text = v.report()
    assert "[static_checks] malformed: no ModelNew" in text
    assert "[lint] rejected: uses torch.compile" in text
    assert "load" in text and "correctness" in text
    skipped_line = [ln for ln in text.splitlines() if ln.startswith("Skipped")]
    assert len(skipped_line) == 1 and "load (needs x); correctness (needs x)" in skipped_line[0]
    assert "[other]" not in text
    assert "All validators passed" not in text


def test_failures_and_result_lookup():
    v = Verdict((ok("a"), bad("b", "oom"), skip("c")))
    assert [r.name for r in v.failures] == ["b"]
    assert v.result("c") == skip("c")
    assert v.result("missing") is None


def test_report_of_invalid_verdict_without_failures_does_not_claim_success():
    v = Verdict((ok("load"), skip("timing", "the worker ended before this stage ran")))
    assert v.status == "invalid"
    text = v.report()
    assert "All validators passed" not in text
    assert "timing" in text


def test_validator_result_to_json_round_trips_fields():
    r = ValidatorResult("c", "failed", "off by 2", "wrong_output", {"max_abs": 2.0}, 0.5)
    assert r.to_json() == {
        "name": "c", "outcome": "failed", "reason": "off by 2", "kind": "wrong_output",
        "details": {"max_abs": 2.0}, "duration_s": 0.5,
    }
