"""The agents' prompts on a command problem are the command domain's (issue 25, item 4): a
scripted `auto`, `pike-b` and `pike-o` search on the CPU example, through the real sandboxed
evaluator, where a FunctionModel captures every system prompt and user message it is sent and
answers as an agent would (a wrong design first, then the fast one, as changed files under
`=== stratagem file: NAME ===` lines). Every prompt must speak of the problem (its editable files,
build command, forbidden library) and none of PyTorch."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from command_fixtures import example_design
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from stratagem.agents.models import RoleModels
from stratagem.config import environment, load_config
from stratagem.context import render
from stratagem.context.curate import Curated
from stratagem.core.design import files_text, text_files
from stratagem.core.search import DesignView, Feedback, Measures
from stratagem.domains import get_domain, load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator
from stratagem.search import state as st
from stratagem.search.loop import SearchLoop
from stratagem.search.policies.auto import AutoPolicy
from stratagem.search.policies.pike_b import PikeBPolicy
from stratagem.search.policies.pike_o import PikeOPolicy
from stratagem.search.policies.registry import policy_settings, resolved_config
from stratagem.search.session import RunSession
from stratagem.store.sqlite import RunStore

PYTORCH_WORDS = ("ModelNew", "torch", "PyTorch")
BUILD = "cc -O2 -o prog main.c kernel.c $(cat flags.txt)"
FAST = files_text({**example_design("fast"), "flags.txt": "-O3\n"})
WRONG = files_text(example_design("wrong"))


@dataclass
class Capture:
    """A scripted model for every role: records (system prompt, user messages) of each request;
    code answers are the wrong design first, then the fast one."""

    sent: list[tuple[str, str]] = field(default_factory=list)
    code_answers: int = 0

    def design(self) -> str:
        self.code_answers += 1
        return WRONG if self.code_answers == 1 else FAST

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        system = str(getattr(messages[-1], "instructions", None) or "")
        user = "\n".join(str(p.content) for m in messages for p in getattr(m, "parts", ())
                         if isinstance(p, UserPromptPart))
        self.sent.append((system, user))
        if info.output_tools:  # the auto policy's structured roles
            tool = info.output_tools[0].name
            if system.startswith("You are the Strategist"):
                args = {"strategy": "innovate", "evidence": [], "rationale": "start",
                        "instructions": "keep a running sum over the window", "variants": []}
            elif system.startswith("You are an Implementor"):
                args = {"source": self.design(), "notes": "running sum"}
            else:
                args = {"cheating": False, "reason": "a running sum is honest"}
            return ModelResponse(parts=[ToolCallPart(tool, json.dumps(args))])
        if "brainstorming agent" in system:
            return ModelResponse(parts=[TextPart("- keep a running sum\n- unroll the loop\n")])
        return ModelResponse(parts=[TextPart(f"Here it is:\n```text\n{self.design()}```\n")])

    def prompts(self) -> list[str]:
        return [s + "\n" + u for s, u in self.sent]


def _loop(tmp_path: Path, small_problem: Path, cpu_config, policy: str, model: Capture,
          **search: object) -> tuple[SearchLoop, RunStore]:
    over = {"search": {"policy": policy, "patience": 10, "confirm_top": 0, **search}, "agents": {"model": "test"},
            "policies": {policy: {}} if policy != "auto" else {}}
    cfg = resolved_config(load_config(None, over)).model_copy(update={"evaluation": cpu_config})
    problem = load_problem(small_problem)
    store = RunStore.open(tmp_path / "run")
    store.add_problem(problem)
    store.start_run(problem.id, policy, cfg.model_dump(mode="json"))
    if policy == "auto":
        pol = AutoPolicy.from_config(cfg, problem, tmp_path / "work", models={"default": FunctionModel(model)})
    else:
        cls = PikeBPolicy if policy == "pike-b" else PikeOPolicy
        pol = cls(cfg, problem, tmp_path / "work", RoleModels.of({"default": FunctionModel(model)}),
                  policy_settings(cfg))  # type: ignore[arg-type]
    ev = Evaluator(cpu_config, LocalExecutor.for_devices(["cpu"], cpu_config, environment()), "cpu")
    return SearchLoop(RunSession(cfg, problem, store, ev, pol)), store  # type: ignore[arg-type]


def _check_prompts(model: Capture) -> None:
    assert model.sent, "no request was made"
    users = [u for _, u in model.sent]
    for text in model.prompts():
        for word in PYTORCH_WORDS:
            assert word not in text, (word, text)
    # every code-writing request names the files, the build and what is forbidden
    code = [u for s, u in model.sent if "stratagem file" in s or "stratagem file" in u]
    assert code
    for u in code:
        assert "kernel.c" in u and "flags.txt" in u, u
        assert BUILD in u, u
        assert "libraries (link names) m" in u and "dlopen" in u, u
        assert "main.c" in u  # the fixed file, named as such
    assert any("=== stratagem file: kernel.c ===" in u for u in users)  # the reference's files, marked


def _check_run(store: RunStore) -> None:
    views = {v.source: v for v in st.stored_views(store)}
    assert FAST in views and WRONG in views
    assert views[WRONG].status == "invalid"
    assert views[FAST].status in ("valid", "unstable", "unreviewed") and (views[FAST].speedup or 0) > 1.0


def test_auto_tells_the_agents_the_command_problem(small_problem: Path, cpu_config, tmp_path: Path) -> None:
    model = Capture()
    loop, store = _loop(tmp_path, small_problem, cpu_config, "auto", model, iterations=1, implementors=1)
    asyncio.run(loop.run())
    _check_prompts(model)
    systems = [s for s, _ in model.sent]
    assert any(s.startswith("You are the Strategist") for s in systems)
    assert any(s.startswith("You are an Implementor") for s in systems)
    feedback = [u for s, u in model.sent if s.startswith("You are an Implementor") and "did not pass" in u]
    assert feedback, "the wrong design's report went back to the Implementor"
    _check_run(store)


@pytest.mark.parametrize("policy", ["pike-b", "pike-o"])
def test_pike_tells_the_agents_the_command_problem(policy: str, small_problem: Path, cpu_config,
                                                   tmp_path: Path) -> None:
    model = Capture()
    loop, store = _loop(tmp_path, small_problem, cpu_config, policy, model, max_queries=5)
    asyncio.run(loop.run())
    _check_prompts(model)
    assert any("brainstorming agent" in s for s, _ in model.sent) or policy == "pike-o"
    _check_run(store)


def test_every_command_template_fills_without_pytorch_words(small_problem: Path) -> None:
    problem = load_problem(small_problem)
    domain = get_domain(problem.domain)
    facts = domain.open(problem, load_config(None, {}).evaluation).agent_facts()
    brief = render.ProblemBrief(name=problem.name, source=problem.source, domain="command",
                                rules=tuple(facts.pop("rules")), facts=facts)
    texts = [render.instructions(r, domain="command", analyst=True) for r in
             ("strategist", "analyst", "implementor", "review")]
    texts += [render.fallback_plan_text(k, "down", "command")[1] for k in ("innovate", "refine")]
    view = DesignView("1" * 64, FAST, "valid", 1, "innovate", "implementor-1", runtime_ms=0.1, speedup=9.0,
                      speedup_low=8.0, speedup_high=10.0, measures=Measures(reference_ms=0.9))
    texts += [render.render_strategist(brief, Curated(best=(view,), total=1), iteration=1),
              render.render_review(brief, view), render.render_analyst("why?", [view], docs="none", domain="command"),
              render.render_implementor_feedback(Feedback(view.id, "invalid", "wrong"), attempt=1, max_attempts=2,
                                                 domain="command")]
    assert "vs the reference" in texts[-4] and "eager" not in texts[-4]
    texts += [render.environment_text("cuda:0", {"device_name": "H200", "capability": "9.0"}, "command")]
    for name in ("design", "strategist", "implementor", "pike", "review", "analyst", "implementor_feedback"):
        texts.append(domain.prompts.template(name))
    for t in texts:
        for word in PYTORCH_WORDS:
            assert word not in t, (word, t)
    # the PyTorch and the command templates have the same sections (what the renderers fill)
    for name in ("design", "strategist", "implementor", "pike", "review", "analyst", "implementor_feedback"):
        missing = set(render.sections(name, "pytorch")) - set(render.sections(name, "command"))
        # profile_available: the command domain offers no `profile` tool (it has no profiler)
        assert missing <= {"second_baseline", "vs_second", "second_fails", "second_unstable", "confirmed_second",
                           "software", "cpu_details", "profile_available"}, (name, missing)


def test_the_offline_design_is_the_reference(small_problem: Path) -> None:
    problem = load_problem(small_problem)
    files = text_files(get_domain(problem.domain).prompts.offline_design(problem), "kernel.c")
    assert set(files) == {"kernel.c", "flags.txt"}
    assert "window_sums" in files["kernel.c"]
