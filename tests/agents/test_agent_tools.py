"""The harness's tools as the agents get them: the Implementor calls `check` on its code and
`profile` before it answers and reads what came back; the runs go to the Session (which counts
them), never to an evaluation; the Strategist is offered `profile` and not `check`; a tool the
problem's domain does not offer is not a tool at all."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from agent_fakes import (
    GOOD_SOURCE,
    WRONG_SOURCE,
    FakeSession,
    call_tool,
    output,
    problem,
    runtime,
    scripted,
    state,
)
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo

from stratagem.agents.implementor import ImplementorTask, run_implementor
from stratagem.agents.strategist import StrategistDeps, plan_iteration
from stratagem.agents.tools import Workdir, session_probe
from stratagem.config import ContextConfig
from stratagem.context import render
from stratagem.context.curate import curate
from stratagem.core.search import Plan


def returns(messages: list[ModelMessage]) -> list[str]:
    return [str(p.content) for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, ToolReturnPart)]


def task(tmp_path: Path) -> ImplementorTask:
    p = problem()
    return ImplementorTask(worker="implementor-1", plan=Plan("innovate", (), "r", "use tanh"), problem=p,
                           brief=render.ProblemBrief(p.name, p.source, domain="pytorch"), workdir=tmp_path)


def test_the_implementor_checks_and_profiles_before_it_answers(tmp_path: Path) -> None:
    offered: list[list[str]] = []
    seen: list[str] = []

    def first(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        offered.append(sorted(t.name for t in i.function_tools))
        return call_tool("check", {"code": WRONG_SOURCE})

    def second(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        seen.extend(returns(m))
        return call_tool("profile", {"target": "reference"})

    def third(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        seen[:] = returns(m)
        return output(i, {"source": GOOD_SOURCE, "notes": "checked first"})

    session = FakeSession(offered=("check", "profile"))
    rt = runtime({"implementor": scripted(first, second, third)})
    res = asyncio.run(run_implementor(task(tmp_path), session, rt.recording(session.record_call)))
    assert res.ok and res.attempts == 1
    assert {"check", "profile"} <= set(offered[0])
    assert session.probed == [("check", WRONG_SOURCE, "implementor-1"), ("profile", "reference", "implementor-1")]
    assert seen == ["check of this code passed", "profile of this code passed"]  # the model read both
    assert [e["source"] for e in session.evaluations] == [GOOD_SOURCE]  # the tools spent no evaluation


def test_a_tool_the_domain_does_not_offer_is_not_a_tool(tmp_path: Path) -> None:
    offered: list[list[str]] = []

    def only(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        offered.append(sorted(t.name for t in i.function_tools))
        return output(i, {"source": GOOD_SOURCE, "notes": ""})

    session = FakeSession(offered=("check",))
    asyncio.run(run_implementor(task(tmp_path), session, runtime({"implementor": scripted(only)})))
    assert "check" in offered[0] and "profile" not in offered[0]
    none = FakeSession()
    asyncio.run(run_implementor(task(tmp_path), none, runtime({"implementor": scripted(only)})))
    assert not {"check", "profile"} & set(offered[1])


def instructions_of(m: list[ModelMessage]) -> str:
    return next(str(x.instructions) for x in m if isinstance(x, ModelRequest) and x.instructions)


def test_the_strategist_may_profile_and_not_check(tmp_path: Path) -> None:
    offered: list[list[str]] = []
    told: list[str] = []

    def plan(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        offered.append(sorted(t.name for t in i.function_tools))
        told.append(instructions_of(m))
        if not returns(m):
            return call_tool("profile", {})
        return output(i, {"strategy": "innovate", "evidence": [], "rationale": "the profile says relu",
                          "instructions": "fuse"})

    st = state([], 1)
    session = FakeSession(offered=("check", "profile"))
    deps = StrategistDeps(workdir=Workdir(tmp_path), probe=session_probe(session, "strategist"),
                          probes=session.probes())
    res = asyncio.run(plan_iteration(render.ProblemBrief.from_state(st), curate(st, ContextConfig(), random.Random(0)),
                                     runtime({"strategist": scripted(plan)}), deps, designs=st.designs,
                                     iteration=1))
    assert res.plan is not None
    assert "profile" in offered[0] and "check" not in offered[0]
    assert session.probed == [("profile", "reference", "strategist")]
    # its instructions say what the tool reports, and no longer that it has no tools
    assert "`profile(target)`" in told[0] and "achieved against the device's" in told[0]
    assert "You have no tools" not in told[0]


def test_the_analyst_is_told_of_profile_and_may_call_it(tmp_path: Path) -> None:
    from stratagem.agents.analyst import AnalystDeps, ask_analyst

    offered: list[list[str]] = []
    told: list[str] = []

    def answer(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        offered.append(sorted(t.name for t in i.function_tools))
        told.append(instructions_of(m))
        if not returns(m):
            return call_tool("profile", {"target": "reference"})
        return ModelResponse(parts=[TextPart("the reference's time is in one kernel")])

    session = FakeSession(offered=("check", "profile"))
    deps = AnalystDeps(workdir=Workdir(tmp_path), probe=session_probe(session, "analyst"), probes=session.probes(),
                       domain="pytorch")
    out = asyncio.run(ask_analyst("where does the time go?", deps, runtime({"analyst": scripted(answer)})))
    assert out == "the reference's time is in one kernel"
    assert "profile" in offered[0] and "check" not in offered[0]
    assert "`profile(target)`" in told[0] and session.probed == [("profile", "reference", "analyst")]
    none = AnalystDeps(workdir=Workdir(tmp_path), domain="pytorch")  # a domain without the tool: not told of it
    asyncio.run(ask_analyst("why?", none, runtime({"analyst": scripted(
        lambda m, i: (told.append(instructions_of(m)), ModelResponse(parts=[TextPart("x")]))[1])})))
    assert "profile(" not in told[-1]
