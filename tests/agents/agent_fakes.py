"""Shared fakes for the agent tests: a scripted Session, FunctionModel builders, a problem."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from stratagem.agents.calls import AgentRuntime
from stratagem.agents.fix_loop import Written
from stratagem.agents.models import RoleModels
from stratagem.agents.writers import WriteRequest
from stratagem.config import AgentsConfig, load_config
from stratagem.core.search import AgentCall, DesignView, Feedback, Remaining, SearchState
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem

ROOT = Path(__file__).resolve().parents[2]
PROBLEM_PATH = ROOT / "examples" / "01_elementwise" / "problem.py"
GOOD_SOURCE = (ROOT / "examples" / "01_elementwise" / "candidates" / "torch_rewrite.py").read_text()
WRONG_SOURCE = GOOD_SOURCE.replace('approximate="tanh"', 'approximate="none"')
NO_MODELNEW = "import torch\n\nclass Something:\n    pass\n"


def problem():
    return load_problem(PROBLEM_PATH)


def design_id(source: str) -> str:
    return candidate_design(source).id


@dataclass
class FakeSession:
    """A Session whose verdicts come from a function of the source."""

    verdict: Callable[[str], Feedback] | None = None
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    calls: list[AgentCall] = field(default_factory=list)
    statuses: list[tuple[str, str]] = field(default_factory=list)
    exhausted: str | None = None
    remaining: Remaining = field(default_factory=Remaining)

    async def evaluate(
        self, source: str, *, strategy: str, parents: Sequence[str] = (), author: str = "",
        tags: dict | None = None,
    ) -> Feedback:
        self.evaluations.append(
            {"source": source, "strategy": strategy, "parents": tuple(parents), "author": author}
        )
        await asyncio.sleep(0)
        fb = (self.verdict(source) if self.verdict is not None
              else Feedback(design_id(source), "valid", "All validators passed.", 1.0, 2.0))
        self.measured.append(DesignView(fb.design_id, source, fb.status, None, strategy, author, tuple(parents),
                                        fb.runtime_ms, fb.speedup, report=fb.report,
                                        created_at=float(len(self.measured) + 1)))
        return fb

    measured: list[DesignView] = field(default_factory=list)
    """Every design evaluated, as `views` shows it."""

    def views(self) -> list[DesignView]:
        return list(self.measured)

    def record_call(self, call: AgentCall) -> None:
        self.calls.append(call)

    def meter(self) -> FakeMeter:
        return FakeMeter(self)

    def budget_left(self) -> str | None:
        return self.exhausted

    def budget_remaining(self) -> Remaining:
        return self.remaining

    def set_status(self, worker: str, status: str) -> None:
        self.statuses.append((worker, status))

    offered: tuple[str, ...] = ()
    """The harness's tools this session offers (`probe` records each run in `probed`)."""
    probed: list[tuple[str, str, str]] = field(default_factory=list)

    def probes(self) -> tuple[str, ...]:
        return self.offered

    async def probe(self, mode: str, target: str, *, author: str = "") -> str:
        self.probed.append((mode, target, author))
        return f"{mode} of this code passed"


@dataclass
class FakeMeter:
    """A call's meter on a FakeSession: it refuses every request while `exhausted` is set."""

    session: FakeSession

    def admit(self) -> str | None:
        return self.session.exhausted

    def answered(self, tokens: int, usd: float | None) -> None:
        return None

    def queries_left(self) -> int | None:
        return self.session.remaining.queries

    def close(self, requests: int | None = None) -> None:
        return None


def valid_if(pred: Callable[[str], bool]) -> Callable[[str], Feedback]:
    def verdict(source: str) -> Feedback:
        if pred(source):
            return Feedback(design_id(source), "valid", "All validators passed.", 0.5, 3.0)
        return Feedback(design_id(source), "invalid",
                        "[correctness] wrong: max abs diff 0.31 at output 0")
    return verdict


async def no_sleep(_: float) -> None:
    return None


@dataclass
class SleepRecorder:
    sleeps: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.sleeps.append(seconds)


def agents_cfg(**kw: Any) -> AgentsConfig:
    base: dict[str, Any] = {"model": "test", "backoff_s": 1.0, "max_retries": 3}
    base.update(kw)
    return AgentsConfig(**base)


def runtime(models: dict[str, Any], cfg: AgentsConfig | None = None, **kw: Any) -> AgentRuntime:
    return AgentRuntime(cfg=cfg or agents_cfg(), models=RoleModels.of(models), **kw)


def full_config(**agents: Any):
    return load_config(None, {"agents": {"model": "test", **agents},
                              "search": {"implementors": 2, "seed": 7}})


# -- FunctionModel helpers -------------------------------------------------------------------


def output(info: AgentInfo, args: dict[str, Any]) -> ModelResponse:
    """Answer with the structured output tool."""
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])


def call_tool(name: str, args: dict[str, Any]) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(name, args)])


def text(content: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(content)])


def user_prompts(messages: Sequence[ModelMessage]) -> list[str]:
    return [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, UserPromptPart) and isinstance(p.content, str)]


def retry_prompts(messages: Sequence[ModelMessage]) -> list[str]:
    """The texts of every retry request (output refused by validation or a validator)."""
    out = []
    for m in messages:
        if not isinstance(m, ModelRequest):
            continue
        for p in m.parts:
            if isinstance(p, RetryPromptPart | RetryFeedbackPart):
                out.append(p.model_response())
            elif isinstance(p, ToolReturnPart) and p.outcome == "retried":
                out.append(str(p.content))
    return out


def tool_returns(messages: Sequence[ModelMessage], name: str) -> list[str]:
    return [str(p.content) for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, ToolReturnPart) and p.tool_name == name]


def last_request_is_tool_return(messages: Sequence[ModelMessage]) -> bool:
    last = messages[-1]
    return isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts)


def scripted(*steps: Callable[[list[ModelMessage], AgentInfo], ModelResponse]) -> FunctionModel:
    """A FunctionModel answering request i with steps[i] (the last step repeats)."""
    seen: list[int] = [0]

    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        i = min(seen[0], len(steps) - 1)
        seen[0] += 1
        return steps[i](messages, info)

    return FunctionModel(fn)


def state(designs: Sequence[DesignView] = (), iteration: int = 1) -> SearchState:
    return SearchState(problem=problem(), designs=tuple(designs), iteration=iteration)


Answer = str | Callable[[WriteRequest], str | None] | None
"""A scripted answer: the design's text, a function of the request, or None (writes nothing)."""


@dataclass
class ScriptWriter:
    """Scripted answers, in order (the last one repeats): each call is recorded as one query
    by the model `script`, with no tokens and no price."""

    answers: Sequence[Answer]
    requests: list[WriteRequest] = field(default_factory=list[WriteRequest])
    """Every request received, in order (what tests inspect)."""

    async def write(self, req: WriteRequest) -> Written:
        meter, refused = req.admitted()
        if refused is not None:
            return refused
        self.requests.append(req)
        if not self.answers:
            answer: Answer = None
        else:
            answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
        text = answer(req) if callable(answer) else answer
        ok = text is not None
        error = None if ok else "no_output: the script wrote nothing"
        if meter is not None:
            meter.close(1)
        if req.record is not None:
            req.record(AgentCall(role=req.role, model="script", prompt_hash="", requests=1, ok=ok, error=error,
                                 latency_s=0.0))
        if text is None:
            return Written(None, 0, "no_output", error)
        return Written(text, 0)
