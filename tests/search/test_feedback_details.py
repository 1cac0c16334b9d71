"""What a policy's feedback carries besides the report text: the failure kind, the error
output's tail and, for a wrong output, the largest differences (PIKE's error-fixing prompts)."""

from __future__ import annotations

from stratagem.core.verdict import ValidatorResult
from stratagem.search.state import ERROR_TAIL_CHARS, failure_info
from stratagem.store.records import EvaluationRecord


def record(*results: ValidatorResult) -> EvaluationRecord:
    return EvaluationRecord(design_id="d", problem_id="p", status="invalid", device="cpu", runtime_ms=None,
                            speedup=None, validators=[r.to_json() for r in results], environment={}, seeds=[1],
                            reference_ms={}, measurements=[], created_at=0.0)


def test_a_wrong_output_gives_the_failing_trials_differences() -> None:
    trials = [{"seed": 1, "ok": True, "max_abs_err": 1e-7, "max_rel_err": 1e-6},
              {"seed": 2, "ok": False, "max_abs_err": 0.25, "max_rel_err": 3.5, "reason": "12 of 64 elements"}]
    info = failure_info(record(ValidatorResult("load", "passed"),
                               ValidatorResult("correctness", "failed", "trial seed 2: 12 of 64", "wrong_output",
                                               {"trials": trials})))
    assert info["validator"] == "correctness" and info["kind"] == "wrong_output"
    assert (info["max_abs_err"], info["max_rel_err"]) == (0.25, 3.5)


def test_a_crash_gives_the_end_of_its_traceback_or_of_the_workers_stderr() -> None:
    tb = "Traceback (most recent call last):\n" + "  frame\n" * 2000 + "RuntimeError: CUDA error: illegal address\n"
    info = failure_info(record(ValidatorResult("load", "failed", "ModelNew raised", "runtime_error", {"traceback": tb})))
    assert info["kind"] == "runtime_error" and info["error_tail"].endswith("illegal address\n")
    assert len(info["error_tail"]) == ERROR_TAIL_CHARS and info["max_abs_err"] is None
    died = failure_info(record(ValidatorResult("correctness", "failed", "killed by SIGSEGV", "crash",
                                               {"stderr_tail": "Fatal Python error: Segmentation fault"})))
    assert died["error_tail"] == "Fatal Python error: Segmentation fault"


def test_nothing_failed_nothing_to_say() -> None:
    assert failure_info(record(ValidatorResult("load", "passed"), ValidatorResult("timing", "passed"))) == {}


def test_the_sessions_feedback_carries_them(tmp_path) -> None:
    import asyncio

    from fakes import ScriptedPolicy, src
    from test_loop import make_loop

    seen = []

    class Looking(ScriptedPolicy):
        async def iterate(self, state, session):  # type: ignore[no-untyped-def]
            seen.append(await session.evaluate(src("bad", invalid="off by one"), strategy="explore"))
            seen.append(await session.evaluate(src("good", 0.5), strategy="explore"))
            return await super().iterate(state, session)

    loop, _, _ = make_loop(tmp_path, Looking([[]]), iterations=1)
    asyncio.run(loop.run())
    bad, good = seen
    assert (bad.validator, bad.kind) == ("correctness", "wrong_output") and "off by one" in bad.report
    assert good.kind is None and good.validator is None
