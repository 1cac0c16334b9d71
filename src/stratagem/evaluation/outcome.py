"""Owns turning what a worker left behind into validator results, strictly.

The response is validated against the protocol (fields, types, request id). If it is missing
or refused, the stage events the worker logged before dying are used, and the stage that was
running is failed with what ended it: a timeout, a signal, an exit code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from stratagem.core.graph import ValidatorSpec
from stratagem.core.verdict import FailureKind, ValidatorResult
from stratagem.evaluation.sandbox import JudgeRun, SandboxResult
from stratagem.worker_api.protocol import EvalResponse, JudgeResponse, ResultModel

_CRASH_SIGNALS = {"SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGFPE", "SIGTRAP", "SIGSYS"}


@dataclass(frozen=True)
class BatchOutcome:
    results: list[ValidatorResult]
    environment: dict[str, Any]


def _sandbox_details(sr: SandboxResult) -> dict[str, Any]:
    return {
        "returncode": sr.returncode,
        "signal": sr.signal_name,
        "duration_s": sr.duration_s,
        "limit_hit": sr.limit_hit,
        "phase_s": dict(sr.phase_s),
        "stderr_tail": sr.stderr_tail[-3000:],
        "stdout_tail": sr.stdout_tail[-1500:],
    }


def interpret(
    specs: Sequence[ValidatorSpec],
    sr: SandboxResult,
    request_id: str,
    timeout_s: float,
    compile_timeout_s: float | None = None,
    compile_stage: str | None = None,
) -> BatchOutcome:
    """Results for a batch; never raises on anything the worker wrote. `compile_stage`: the
    stage whose time counts against `compile_timeout_s` (the request's; PyTorch: `load`)."""
    try:
        return _interpret(specs, sr, request_id, timeout_s, compile_timeout_s, compile_stage)
    except Exception as e:  # noqa: BLE001 - whatever a candidate left behind, it is data
        return BatchOutcome(
            [ValidatorResult(specs[0].name, "failed", kind="malformed",
                             reason=f"the worker left output the harness cannot read: {type(e).__name__}: {e}",
                             details=_sandbox_details(sr))],
            {},
        )


def _interpret(specs: Sequence[ValidatorSpec], sr: SandboxResult, request_id: str, timeout_s: float,
               compile_timeout_s: float | None, compile_stage: str | None) -> BatchOutcome:
    names = [s.name for s in specs]
    problem: str | None = sr.response_problem
    if sr.response_text is not None and not sr.timed_out:
        try:
            resp = EvalResponse.model_validate_json(sr.response_text)
        except ValidationError as e:
            problem = f"the worker's response breaks the protocol: {e.error_count()} errors, first: {e.errors()[0]['msg']}"
        else:
            if resp.request_id != request_id:
                problem = "the worker's response answers another request"
            elif sorted(r.name for r in resp.results) != sorted(names):
                problem = "the worker's response does not hold exactly one result per requested stage"
            else:
                results = [r.to_result() for r in resp.results]
                return BatchOutcome(apply_judge(results, sr, request_id), dict(resp.environment))
    return BatchOutcome(_from_progress(specs, sr, problem, timeout_s, compile_timeout_s, compile_stage), {})


JUDGED = ("correctness", "timing")
"""The stages whose deciding outputs the judge checks (the first is blamed when it cannot)."""


def apply_judge(results: list[ValidatorResult], sr: SandboxResult, request_id: str) -> list[ValidatorResult]:
    """The worker's results with the judge's findings: a stage the judge failed is failed, a
    judge that could not answer fails the first judged stage (closed: no confirmation, no
    pass), and a confirmed stage carries what the judge checked in its details."""
    if sr.judge is None:
        return results
    answer, problem = _judge_answer(sr.judge, request_id)
    names = [r.name for r in results]
    out = list(results)
    if answer is None:
        stage = next((n for n in JUDGED if n in names), None)
        if stage is None:
            return results
        i = names.index(stage)
        out[i] = ValidatorResult(stage, "failed", kind="harness_error", details=dict(out[i].details),
                                 reason=f"judge: the outputs could not be confirmed: {problem}",
                                 duration_s=out[i].duration_s)
        return out
    failed = {f.stage: f for f in answer.failures}
    info = {"checked": list(answer.checked), "notes": list(answer.notes),
            "work_s": sr.judge.duration_s - sr.judge.wait_s, "wall_s": sr.judge.duration_s,
            "after_worker_s": sr.judge.after_worker_s, **{f"{k}_s": v for k, v in answer.timings_s.items()}}
    for i, r in enumerate(results):
        if r.name in failed:
            f = failed[r.name]
            out[i] = ValidatorResult(r.name, "failed", kind=f.kind, reason=f.reason,
                                     details={**r.details, "judge": info}, duration_s=r.duration_s)
        elif r.name in JUDGED:
            details = {**r.details, "judge": info}
            if r.name == "timing" and answer.work is not None:  # the roofline's input, from outside the worker
                details["work"] = dict(answer.work)
            out[i] = ValidatorResult(r.name, r.outcome, r.reason, r.kind, details, r.duration_s)
    return out


def _judge_answer(j: JudgeRun, request_id: str) -> tuple[JudgeResponse | None, str]:
    if j.timed_out:
        return None, f"the judge ran past its limit ({j.duration_s:.0f} s)"
    if j.response_text is None:
        why = j.response_problem or (f"it died with {j.signal_name}" if j.signal_name else
                                     f"it exited with code {j.returncode} and no answer")
        tail = j.stderr_tail.strip().splitlines()[-1:] if j.stderr_tail.strip() else []
        return None, why + (f": {tail[0]}" if tail else "")
    try:
        answer = JudgeResponse.model_validate_json(j.response_text)
    except ValidationError as e:
        return None, f"its answer breaks the protocol ({e.error_count()} errors)"
    if answer.request_id != request_id:
        return None, "its answer is for another request"
    if not j.nonce or answer.nonce != j.nonce:
        return None, "its answer does not carry the go file's nonce (a go file the harness did not write?)"
    return answer, ""


def _from_progress(
    specs: Sequence[ValidatorSpec],
    sr: SandboxResult,
    problem: str | None,
    timeout_s: float,
    compile_timeout_s: float | None,
    compile_stage: str | None = None,
) -> list[ValidatorResult]:
    names = {s.name for s in specs}
    done, running = _replay(sr, names)
    compiling = compile_timeout_s is not None and compile_stage in names and compile_stage not in done
    limit = compile_timeout_s if (sr.limit_hit == "compile" or (sr.limit_hit is None and compiling)) else timeout_s
    kind, reason = _death(sr, problem, limit, whole=compile_timeout_s is None)  # type: ignore[arg-type]
    details = _sandbox_details(sr)
    results = list(done.values())
    if running is not None:
        results.append(ValidatorResult(running, "failed", reason=f"{reason} during {running}", kind=kind, details=details))
    elif len(done) < len(specs):
        # Died before any stage started (or between stages): blame the next stage.
        nxt = next(s.name for s in specs if s.name not in done)
        if not sr.progress and kind == "crash" and not sr.timed_out:
            kind, reason = "harness_error", f"the worker failed to start ({reason})"
        results.append(ValidatorResult(nxt, "failed", reason=f"{reason} before {nxt}", kind=kind, details=details))
    elif sr.timed_out:
        # Every stage logged a result, then the worker hung: the candidate left work behind.
        last = specs[-1].name
        results = [r for r in results if r.name != last]
        results.append(ValidatorResult(last, "failed", reason=f"{reason} after {last}", kind=kind, details=details))
    elif problem is not None:
        # Every stage logged a result but the response is unusable: do not trust the run.
        last = specs[-1].name
        results = [r for r in results if r.name != last]
        results.append(ValidatorResult(last, "failed", reason=problem, kind="malformed", details=details))
    return results


def _replay(sr: SandboxResult, names: set[str]) -> tuple[dict[str, ValidatorResult], str | None]:
    """The results the worker logged for `names`, and the stage it had started and not ended."""
    done: dict[str, ValidatorResult] = {}
    running: str | None = None
    for ev in sr.progress:
        stage = ev.get("stage")
        if not isinstance(stage, str) or stage not in names:
            continue
        if ev.get("event") == "start":
            running = stage
        elif ev.get("event") == "end":
            try:
                r = ResultModel.model_validate(ev.get("result")).to_result()
            except ValidationError:
                continue
            if r.name == ev["stage"]:
                done[r.name] = r
            if running == r.name:
                running = None
    return done, running


def _split(sr: SandboxResult) -> str:
    """`; it ran 121 s, compiled 4 s, waited 0 s`: where the worker's time went."""
    t = sr.phase_s or {}
    if not t:
        return ""
    return (f"; it ran {t.get('run', 0.0):.0f} s, compiled {t.get('compile', 0.0):.0f} s, "
            f"waited for the device lock {t.get('wait', 0.0):.0f} s")


def _death(sr: SandboxResult, problem: str | None, timeout_s: float, whole: bool = False) -> tuple[FailureKind, str]:
    """`whole`: one limit covered the whole evaluation, compiles included (a limit the user set)."""
    if sr.lost:
        return "harness_error", sr.lost
    if sr.timed_out:
        return _timeout_death(sr, timeout_s, whole)
    if sr.signal_name in _CRASH_SIGNALS:
        return "crash", f"the worker died with {sr.signal_name}"
    if sr.signal_name == "SIGKILL":
        return "oom", "the worker was killed with SIGKILL (most likely by the out-of-memory killer)"
    if sr.signal_name is not None:
        return "crash", f"the worker was killed by {sr.signal_name}"
    if sr.returncode not in (0, None):
        return "crash", f"the worker exited with code {sr.returncode}"
    if problem is not None and sr.response_text is not None:
        return "malformed", problem
    return "crash", "the worker exited without a response"


def _timeout_death(sr: SandboxResult, timeout_s: float, whole: bool) -> tuple[FailureKind, str]:
    """`_death` of a worker killed at a limit, by which limit it hit."""
    if whole and sr.limit_hit == "run":
        return "timeout", (f"the worker was killed at the {timeout_s:g} s limit set for the whole evaluation "
                           "(timeout_s, compiles included; raise it with --timeout S, or give compiles their own "
                           "limit with [evaluation] compile_timeout_s)")
    if sr.limit_hit == "compile":
        return "timeout", (f"the worker was killed at the {timeout_s:g} s compile limit (time while "
                           "compiler processes ran or torch.compile compiled; raise it with [evaluation] "
                           f"compile_timeout_s){_split(sr)}")
    if sr.limit_hit == "lock_wait":
        return "harness_error", ("the worker was killed after waiting lock_wait_timeout_s for its "
                                 "device's lock (other workers held it: not the candidate's fault)")
    if sr.limit_hit == "run":
        return "timeout", (f"the worker was killed at the {timeout_s:g} s run limit (timeout_s; "
                           "compiles and lock waits not counted; raise it with --timeout S, "
                           "[evaluation] timeout_s or the problem's STRATAGEM = {'timeout_s': S})"
                           f"{_split(sr)}")
    return "timeout", f"the worker was killed after the {timeout_s:g} s timeout"
