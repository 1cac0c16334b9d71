"""The Implementor loop: feedback in one conversation, static checks as output retries, limits."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agent_fakes import (
    GOOD_SOURCE,
    NO_MODELNEW,
    WRONG_SOURCE,
    FakeSession,
    agents_cfg,
    output,
    problem,
    retry_prompts,
    runtime,
    scripted,
    text,
    user_prompts,
    valid_if,
)
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo

from stratagem.agents.implementor import ImplementorTask, run_implementor, strip_fences
from stratagem.context import render
from stratagem.core.search import Plan

PLAN = Plan("innovate", (), "first try", "use F.gelu with approximate='tanh'")


def task(tmp_path: Path, worker: str = "implementor-1") -> ImplementorTask:
    p = problem()
    return ImplementorTask(worker=worker, plan=PLAN, problem=p,
                           brief=render.ProblemBrief(p.name, p.source, domain="pytorch"), workdir=tmp_path)


def answer(source: str):
    return lambda m, i: output(i, {"source": source, "notes": "n"})


def test_invalid_then_feedback_in_the_same_conversation_then_valid(tmp_path: Path) -> None:
    seen: list[list[str]] = []

    def second(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        seen.append(user_prompts(m))
        return output(i, {"source": GOOD_SOURCE, "notes": "fixed"})

    session = FakeSession(verdict=valid_if(lambda s: s == GOOD_SOURCE))
    rt = runtime({"implementor": scripted(answer(WRONG_SOURCE), second)})
    res = asyncio.run(run_implementor(task(tmp_path), session, rt.recording(session.record_call)))
    assert res.ok and res.attempts == 2
    assert [e["source"] for e in session.evaluations] == [WRONG_SOURCE, GOOD_SOURCE]
    assert all(e["author"] == "implementor-1" for e in session.evaluations)
    assert [e["strategy"] for e in session.evaluations] == ["innovate", "fix"]  # how each was made
    prompts = seen[0]
    assert prompts[0].startswith("# Task for implementor-1")  # the same conversation continues
    assert "max abs diff 0.31" in prompts[-1] and "attempt 1 of" in prompts[-1]
    assert [c.role for c in session.calls] == ["implementor", "implementor"]
    assert ("implementor-1", "attempt 2: evaluating") in session.statuses
    assert len(res.design_ids) == 2 and res.feedback is not None and res.feedback.status == "valid"


def test_static_rejection_costs_an_output_retry_not_an_evaluation(tmp_path: Path) -> None:
    retries: list[list[str]] = []

    def second(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        retries.append(retry_prompts(m))
        return output(i, {"source": "```python\n" + GOOD_SOURCE + "```", "notes": "fenced"})

    session = FakeSession()
    rt = runtime({"implementor": scripted(answer(NO_MODELNEW), second)})
    res = asyncio.run(run_implementor(task(tmp_path), session, rt.recording(session.record_call)))
    assert res.ok and res.attempts == 1
    assert len(session.evaluations) == 1
    assert session.evaluations[0]["source"].strip() == GOOD_SOURCE.strip()  # fences stripped
    assert "ModelNew" in retries[0][-1] and "static checks rejected" in retries[0][-1]
    assert session.calls[0].retries == 1


def test_static_rejections_exhausted_log_the_candidate_once(tmp_path: Path) -> None:
    session = FakeSession(verdict=valid_if(lambda s: False))
    cfg = agents_cfg(output_retries=1)
    rt = runtime({"implementor": scripted(answer(NO_MODELNEW))}, cfg)
    res = asyncio.run(run_implementor(task(tmp_path), session, rt.recording(session.record_call)))
    assert not res.ok
    assert "static checks kept rejecting" in res.reason
    assert len(session.evaluations) == 1  # logged as a failed design, then the loop stops


def test_token_limit_exhaustion_fails_with_reason(tmp_path: Path) -> None:
    big = "x" * 6_000  # each answer is large, so the conversation grows fast

    def always_wrong(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        return output(i, {"source": WRONG_SOURCE, "notes": big})

    session = FakeSession(verdict=valid_if(lambda s: False))
    cfg = agents_cfg(implementor_token_limit=3_000, implementor_max_attempts=20)
    rt = runtime({"implementor": scripted(always_wrong)}, cfg)
    res = asyncio.run(run_implementor(task(tmp_path), session, rt.recording(session.record_call)))
    assert not res.ok
    assert "token limit" in res.reason
    assert res.tokens >= 3_000 or "usage_limit" in res.error_kinds
    assert len(session.evaluations) < 20


def test_max_attempts_stop_the_loop(tmp_path: Path) -> None:
    session = FakeSession(verdict=valid_if(lambda s: False))
    rt = runtime({"implementor": scripted(answer(WRONG_SOURCE))},
                 agents_cfg(implementor_max_attempts=3))
    res = asyncio.run(run_implementor(task(tmp_path), session, rt))
    assert not res.ok and res.attempts == 3 and len(session.evaluations) == 3
    assert "after 3 evaluations" in res.reason


def test_budget_exhausted_before_an_attempt(tmp_path: Path) -> None:
    session = FakeSession(exhausted="usd")
    rt = runtime({"implementor": scripted(answer(GOOD_SOURCE))})
    res = asyncio.run(run_implementor(task(tmp_path), session, rt))
    assert not res.ok and "usd" in res.reason and session.evaluations == []


def test_llm_failure_ends_the_conversation_as_data(tmp_path: Path) -> None:
    session = FakeSession()
    rt = runtime({"implementor": scripted(lambda m, i: text("no tool call, just chat"))})
    res = asyncio.run(run_implementor(task(tmp_path), session, rt))
    assert not res.ok and res.reason.startswith("LLM failure") and res.error_kinds == ("output",)


def test_strip_fences() -> None:
    assert strip_fences("```python\nx = 1\n```") == "x = 1\n"
    assert strip_fences("x = 1\n") == "x = 1\n"
    assert strip_fences("```\nx = 1\n```\n") == "x = 1\n"


@pytest.mark.parametrize("strategy, parents", [("innovate", ()), ("refine", ("d1",)), ("combine", ("d1", "d2"))])
def test_an_innovate_design_has_no_parent_even_when_its_plan_cites_evidence(tmp_path: Path, strategy, parents) -> None:
    from dataclasses import replace

    session = FakeSession(verdict=valid_if(lambda s: True))
    rt = runtime({"implementor": scripted(answer(GOOD_SOURCE))})
    t = replace(task(tmp_path), plan=Plan(strategy, ("d1", "d2")[: max(1, len(parents))], "why", "how"))
    asyncio.run(run_implementor(t, session, rt.recording(session.record_call)))
    assert tuple(session.evaluations[0]["parents"]) == parents


def test_a_restated_design_is_not_accepted_and_the_implementor_is_told(tmp_path: Path) -> None:
    from stratagem.core.search import Feedback

    earlier = "x" * 64
    seen: list[list[str]] = []

    def verdict(source: str) -> Feedback:
        if source == WRONG_SOURCE:  # the session links it to an earlier valid design
            return Feedback(earlier, "valid", "Not evaluated again: restates", 0.5, 2.0, reused=True,
                            duplicate_of=earlier)
        return Feedback("new" + "0" * 61, "valid", "All validators passed.", 0.4, 2.5)

    def second(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        seen.append(user_prompts(m))
        return output(i, {"source": GOOD_SOURCE, "notes": "different"})

    session = FakeSession(verdict=verdict)
    rt = runtime({"implementor": scripted(answer(WRONG_SOURCE), second)})
    res = asyncio.run(run_implementor(task(tmp_path), session, rt.recording(session.record_call)))
    assert res.ok and res.attempts == 2 and res.feedback.design_id.startswith("new")
    told = seen[0][-1]
    assert "a restatement, not evaluated" in told and earlier[:12] in told and "differs in substance" in told
