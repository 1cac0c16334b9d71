"""The Strategist: a valid plan, evidence checked against the context, the Analyst as a tool."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from agent_fakes import (
    call_tool,
    output,
    retry_prompts,
    runtime,
    scripted,
    state,
    text,
    tool_returns,
)
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from stratagem.agents.strategist import StrategistDeps, plan_iteration, resolve_ids
from stratagem.agents.tools import Workdir
from stratagem.config import ContextConfig
from stratagem.context import render
from stratagem.context.curate import curate
from stratagem.core.search import DesignView

A = "a" * 8 + "1" * 56
B = "b" * 8 + "2" * 56
F = "f" * 8 + "3" * 56


def designs() -> list[DesignView]:
    return [
        DesignView(A, "class ModelNew: pass  # A\n", "valid", 1, runtime_ms=2.0, speedup=1.5,
                   created_at=1.0),
        DesignView(B, "class ModelNew: pass  # B\n", "valid", 1, runtime_ms=1.0, speedup=3.0,
                   created_at=2.0),
        DesignView(F, "class ModelNew: oops\n", "invalid", 1, report="[load] compile: boom",
                   created_at=3.0),
    ]


def plan_for(st, tmp_path: Path, model: FunctionModel, ask=None, context: ContextConfig | None = None):
    curated = curate(st, context or ContextConfig(), random.Random(0))
    deps = StrategistDeps(workdir=Workdir(tmp_path), ask=ask)
    rt = runtime({"strategist": model})
    return asyncio.run(plan_iteration(render.ProblemBrief.from_state(st), curated, rt, deps,
                                      designs=st.designs, iteration=st.iteration)), deps


def test_valid_plan_with_prefix_evidence(tmp_path: Path) -> None:
    model = scripted(lambda m, i: output(i, {
        "strategy": "combine", "evidence": [A[:8], B[:12]],
        "rationale": "A and B each fix half", "instructions": "fuse A's kernel with B's layout"}))
    res, _ = plan_for(state(designs(), 2), tmp_path, model)
    assert res.plan is not None
    assert res.plan.strategy == "combine"
    assert res.plan.evidence == (A, B)  # prefixes resolved to full ids
    assert res.outcome.call.role == "strategist" and res.outcome.call.ok


def test_unknown_evidence_is_sent_back_as_a_retry(tmp_path: Path) -> None:
    seen: list[list[str]] = []

    def first(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        return output(i, {"strategy": "refine", "evidence": ["deadbeef00"],
                          "rationale": "r", "instructions": "do it"})

    def second(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        seen.append(retry_prompts(m))
        return output(i, {"strategy": "refine", "evidence": [B], "rationale": "r",
                          "instructions": "do it"})

    res, _ = plan_for(state(designs(), 2), tmp_path, scripted(first, second))
    assert res.plan is not None and res.plan.evidence == (B,)
    assert "deadbeef00" in seen[0][0] and "not the id of a design" in seen[0][0]
    assert res.outcome.call.retries == 1


def test_a_plan_may_cite_a_design_the_analyst_named_that_its_prompt_did_not_show(tmp_path: Path) -> None:
    """Issue 58: the Strategist is shown the curated few, the Analyst reads every design of the
    run; a plan citing a design the Analyst named was refused. Both now draw on the run's designs."""
    narrow = ContextConfig(best=1, worst=0, recent=0, failed=0)
    st = state(designs(), 2)
    assert curate(st, narrow, random.Random(0)).ids == (B,)  # A and F are not in its prompt

    async def ask(q: str) -> str:
        return f"{A[:10]} is slower than B only because of its launch grid; {F[:10]} failed to compile"

    def plan(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        assert not retry_prompts(m)  # accepted the first time
        return output(i, {"strategy": "combine", "evidence": [A[:10], B[:10]], "rationale": "per the analyst",
                          "instructions": "B's kernel with A's grid"})

    model = scripted(lambda m, i: call_tool("ask_analyst", {"question": "why is A slower?"}), plan)
    res, deps = plan_for(st, tmp_path, model, ask=ask, context=narrow)
    assert res.plan is not None and res.plan.evidence == (A, B) and res.outcome.call.retries == 0
    assert set(deps.known_ids) == {A, B, F} and F in deps.failed_ids  # the failed one may be reattempted too

    def unknown(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        return output(i, {"strategy": "refine", "evidence": ["deadbeef00"], "rationale": "r", "instructions": "x"})

    seen: list[str] = []

    def fixed(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        seen.extend(retry_prompts(m))
        return output(i, {"strategy": "reattempt_failure", "evidence": [F[:10]], "rationale": "r",
                          "instructions": "fix the build"})

    res, _ = plan_for(st, tmp_path, scripted(unknown, fixed), context=narrow)
    assert res.plan is not None and res.plan.evidence == (F,)
    assert "not the id of a design of this run" in seen[0] and "and 2 other designs of the run" in seen[0]


def test_strategy_needs_enough_evidence(tmp_path: Path) -> None:
    def first(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        return output(i, {"strategy": "combine", "evidence": [A], "rationale": "r",
                          "instructions": "x"})

    def second(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        assert "at least 2" in retry_prompts(m)[-1]
        return output(i, {"strategy": "reattempt_failure", "evidence": [F], "rationale": "r",
                          "instructions": "fix the compile error"})

    res, _ = plan_for(state(designs(), 2), tmp_path, scripted(first, second))
    assert res.plan is not None and res.plan.strategy == "reattempt_failure"
    assert res.plan.evidence == (F,)


def test_garbage_output_is_a_failure_as_data(tmp_path: Path) -> None:
    res, _ = plan_for(state(designs(), 2), tmp_path, scripted(lambda m, i: text("I think so")))
    assert res.plan is None
    assert res.outcome.error_kind == "output"
    assert res.error and "output" in res.error
    assert not res.outcome.call.ok


def test_ask_analyst_tool_runs_the_child(tmp_path: Path) -> None:
    questions: list[str] = []

    async def ask(q: str) -> str:
        questions.append(q)
        return "B is faster because it fuses everything"

    answers: list[str] = []

    def second(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        answers.extend(tool_returns(m, "ask_analyst"))
        return output(i, {"strategy": "refine", "evidence": [B], "rationale": "per the analyst",
                          "instructions": "tune block size of B"})

    model = scripted(lambda m, i: call_tool("ask_analyst", {"question": "why is B fast?"}), second)
    res, deps = plan_for(state(designs(), 2), tmp_path, model, ask=ask)
    assert res.plan is not None and res.plan.strategy == "refine"
    assert questions == ["why is B fast?"] and deps.questions == questions
    assert answers == ["B is faster because it fuses everything"]


def test_first_iteration_innovates_without_evidence(tmp_path: Path) -> None:
    model = scripted(lambda m, i: output(i, {"strategy": "innovate", "evidence": [],
                                             "rationale": "nothing yet", "instructions": "fuse"}))
    res, _ = plan_for(state((), 1), tmp_path, model)
    assert res.plan is not None and res.plan.evidence == ()


@pytest.mark.parametrize(
    ("cited", "ok", "problems"),
    [([A], [A], 0), ([A[:6]], [A], 0), ([A[:5]], [], 1), (["zzzzzzzz"], [], 1), ([A, A], [A], 0)],
)
def test_resolve_ids(cited: list[str], ok: list[str], problems: int) -> None:
    ids, errs = resolve_ids(cited, [A, B, F])
    assert ids == ok and len(errs) == problems
