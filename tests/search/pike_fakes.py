"""A scripted PIKE model (pydantic-ai `FunctionModel`) and a loop to run a PIKE policy on the
fake evaluator: every answer is a candidate whose verdict is written in its own source."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fakes import FakeEvaluator, src
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from stratagem.agents.models import RoleModels
from stratagem.config import load_config
from stratagem.domains.pytorch.problem import load_problem
from stratagem.search.loop import SearchLoop
from stratagem.search.policies.pike_b import PikeBPolicy
from stratagem.search.policies.pike_o import PikeOPolicy
from stratagem.search.policies.registry import policy_settings, resolved_config
from stratagem.search.session import RunSession
from stratagem.store.sqlite import RunStore

WRONG_BY = "# max_abs_err=0.5\n"
PROBLEM = Path(__file__).resolve().parents[1] / "fixtures/problem_relu.py"


def prompt_of(messages: list[ModelMessage]) -> str:
    return "\n".join(str(p.content) for m in messages for p in getattr(m, "parts", ())
                     if isinstance(p, UserPromptPart))


def role_of(prompt: str) -> str:
    if "You are a brainstorming agent" in prompt:
        return "brainstorm"
    if "Fix the compilation or runtime error" in prompt or "Fix the correctness issue" in prompt:
        return "fix"
    if "# Evolution history" in prompt:
        return "crossover"
    if "Your current program" in prompt:
        return "mutate"
    return "optimize"


def idea_asked(prompt: str) -> int | None:
    """The idea number a PIKE-B phase-0 prompt asks for (its own task line, never a sibling's
    idea listed in flight)."""
    m = re.search(r"^Focus specifically on the following optimization task: idea number (\d+)$", prompt, re.M)
    return int(m.group(1)) if m else None


@dataclass
class Script:
    """Answers by role: the brainstorm gets `ideas`; code queries get a fresh candidate whose
    runtime falls with every query; `bad(n)` says which code queries (1-based) answer a
    wrong-output candidate; fixes answer a valid one unless `fix_fails`."""

    ideas: int = 10
    bad: Callable[[int], bool] = lambda n: False
    fix_fails: bool = False
    calls: list[tuple[str, str]] = field(default_factory=list)
    """(role, prompt) of every request."""
    no_code: Callable[[int], bool] = lambda n: False
    answer: Callable[[str, str, int], str | None] | None = None
    """(role, prompt, n) -> the answer's text, or None for the scripted default; it may raise
    (a failed request)."""
    instructions: list[tuple[str, str]] = field(default_factory=list)
    """(role, system prompt) of every request."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    """pydantic-ai runs a plain function in a worker thread: requests asked at once reach it in
    whatever order the threads run, so `calls` is in that order (not the slots'), and each
    request's number `n` is taken with its entry, under this lock."""

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = prompt_of(messages)
        role = role_of(prompt)
        with self.lock:
            self.calls.append((role, prompt))
            self.instructions.append((role, str(getattr(messages[-1], "instructions", None) or "")))
            n = len(self.calls)
        if self.answer is not None and (text := self.answer(role, prompt, n)) is not None:
            return ModelResponse(parts=[TextPart(text)])
        if role == "brainstorm":
            return ModelResponse(parts=[TextPart("\n".join(f"- idea number {i}" for i in range(self.ideas)))])
        if self.no_code(n):
            return ModelResponse(parts=[TextPart("I would fuse the operators.")])
        ms = round(1.0 / (1.0 + 0.05 * n), 4)
        if role == "fix":
            code = src(f"fix-{n}", invalid="still wrong") + WRONG_BY if self.fix_fails else src(f"fix-{n}", ms)
        else:
            code = src(f"{role}-{n}", invalid="wrong") + WRONG_BY if self.bad(n) else src(f"{role}-{n}", ms)
        return ModelResponse(parts=[TextPart(f"Here it is:\n```python\n{code}```\n")])

    def roles(self) -> list[str]:
        return [r for r, _ in self.calls]


def make_pike_loop(tmp_path: Path, policy: str, script: Script, settings: dict | None = None,
                   evaluator: FakeEvaluator | None = None, **search) -> tuple[SearchLoop, RunStore, FakeEvaluator]:
    over = {"search": {"policy": policy, **search}, "agents": {"model": "test"},
            "policies": {policy: settings or {}}}
    cfg = resolved_config(load_config(None, over))
    problem = load_problem(PROBLEM)
    store = RunStore.open(tmp_path / "run")
    store.add_problem(problem)
    store.start_run(problem.id, policy, cfg.model_dump(mode="json"))
    models = RoleModels.of({"default": FunctionModel(script)})
    cls = PikeBPolicy if policy == "pike-b" else PikeOPolicy
    pol = cls(cfg, problem, tmp_path / "work", models, policy_settings(cfg))  # type: ignore[arg-type]
    ev = evaluator or FakeEvaluator()
    return SearchLoop(RunSession(cfg, problem, store, ev, pol)), store, ev  # type: ignore[arg-type]


def marker_ms(source: str) -> float | None:
    m = re.search(r"# runtime_ms=([0-9.]+)", source)
    return float(m.group(1)) if m else None
