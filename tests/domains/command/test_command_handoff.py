"""Agents hand templates to the tuner (issue 27, item 3): a scripted `auto` search on the templated
CPU example (examples/command/blocked_scan, per element 8192 / (BLOCK x GROUP) + BLOCK + 4 x
GROUP steps) whose Implementor answers with a template. The loop tunes it for
`tune_evaluations` points through the real sandboxed harness, charged to the run's budgets;
every point is stored with its parameters as tags and the template's author's parent; the best
point reaches the next prompt with its parameters; an invalid template is recorded and fed back;
`tune_evaluations = 0` evaluates the defaults once. Each evaluation takes one to three seconds."""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from stratagem.agents.models import RoleModels
from stratagem.config import EvaluationConfig, environment, load_config
from stratagem.core.design import Design
from stratagem.core.search import DesignView, Feedback, Remaining
from stratagem.core.template import parse_template
from stratagem.domains import load_problem
from stratagem.evaluation.executors import LocalExecutor
from stratagem.evaluation.service import Evaluator
from stratagem.search import state as st
from stratagem.search.loop import RunOutcome, SearchLoop
from stratagem.search.policies.auto import AutoPolicy
from stratagem.search.policies.handoff import HandoffSession, HandoffSettings
from stratagem.search.policies.pike_b import PikeBPolicy
from stratagem.search.policies.registry import policy_settings, resolved_config
from stratagem.search.policies.tune import TAG_HANDOFF, TAG_PARAMS, TAG_TEMPLATE, shares, tuning
from stratagem.search.session import RunSession
from stratagem.store.sqlite import RunStore

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "command" / "blocked_scan"
TEMPLATE_TEXT = (EXAMPLE / "designs" / "template" / "scan.c").read_text()
# The example's template, GROUP fixed at 8 and a 64-bit accumulator: BLOCK alone is tuned (per
# element 1024 / BLOCK + BLOCK + 32 steps, least at 32), from a default of 4.
TEMPLATE = (TEMPLATE_TEXT.replace("pow2(1, 4096)", "pow2(4, 64, default=4)").replace("pow2(1, 64)", "choice(8)")
            .replace('choice("unsigned long long", "unsigned int")', 'choice("unsigned long long")'))
# A constraint no point meets: the template cannot be tuned.
UNSATISFIABLE = TEMPLATE.replace("require BLOCK * GROUP <= 16384", "require BLOCK * GROUP > 16384")
FAST_TIMING = """
[timing]
pairs = 4
runs = 2
warmup = 0
"""


@pytest.fixture
def problem_dir(tmp_path: Path) -> Path:
    """The example with smaller inputs and fewer timed pairs (an evaluation in about a second)."""
    root = tmp_path / "blocked_scan"
    shutil.copytree(EXAMPLE, root)
    toml = (root / "problem.toml").read_text().replace("n = [12000, 16000]", "n = [6000, 8000]")
    (root / "problem.toml").write_text(toml.split("[timing]")[0] + FAST_TIMING)
    return root


@dataclass
class Scripted:
    """Every role of `auto`: the Strategist innovates, the Implementor answers `answers` in order
    (the last repeats); records each role's user prompts."""

    answers: list[str]
    prompts: dict[str, list[str]] = field(default_factory=dict[str, list[str]])

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        system = str(getattr(messages[-1], "instructions", None) or "")
        user = "\n".join(str(p.content) for m in messages for p in getattr(m, "parts", ())
                         if isinstance(p, UserPromptPart))
        role = "strategist" if system.startswith("You are the Strategist") else (
            "implementor" if system.startswith("You are an Implementor") else "other")
        self.prompts.setdefault(role, []).append(user)
        tool = info.output_tools[0].name
        if role == "strategist":
            args = {"strategy": "innovate", "evidence": [],
                    "rationale": "tune the blocks", "instructions": "write the scan as a template", "variants": []}
        elif role == "implementor":
            n = len(self.prompts["implementor"])
            args = {"source": self.answers[min(n, len(self.answers)) - 1], "notes": "a template"}
        else:
            args = {"cheating": False, "reason": "honest"}
        return ModelResponse(parts=[ToolCallPart(tool, json.dumps(args))])


def search(problem_dir: Path, cpu_config: EvaluationConfig, tmp_path: Path, model: Scripted,
           **over: object) -> tuple[RunOutcome, list[DesignView], SearchLoop, int]:
    """Run a scripted `auto` search; its outcome, views, loop and the evaluations it stored."""
    cfg = resolved_config(load_config(None, {
        "search": {"policy": "auto", "iterations": 1, "implementors": 1, "patience": None, "confirm_top": 0,
                   **over},
        "agents": {"model": "test", "analyst": False}, "policies": {"tune": {"startup": 2}}}))
    cfg = cfg.model_copy(update={"evaluation": cpu_config})
    problem = load_problem(problem_dir)
    ev = Evaluator(cpu_config, LocalExecutor.for_devices(["cpu"], cpu_config, environment()), "cpu")
    with RunStore.open(tmp_path / "run") as store:
        store.add_problem(problem)
        store.start_run(problem.id, "auto", cfg.model_dump(mode="json"))
        policy = AutoPolicy.from_config(cfg, problem, tmp_path / "work", models={"default": FunctionModel(model)})
        loop = SearchLoop(RunSession(cfg, problem, store, ev, policy))
        out = asyncio.run(loop.run())
        return out, st.stored_views(store), loop, len(store.evaluations())


def points(views: list[DesignView]) -> list[DesignView]:
    return sorted((v for v in views if TAG_PARAMS in v.tags), key=lambda v: v.tags[TAG_HANDOFF]["point"])


def test_an_implementors_template_is_tuned_and_its_best_point_reaches_the_next_prompt(
        problem_dir: Path, cpu_config: EvaluationConfig, tmp_path: Path) -> None:
    fixed = parse_template({"scan.c": TEMPLATE}).render({"BLOCK": 16, "GROUP": 8, "ACC": "unsigned long long"})
    model = Scripted([TEMPLATE, fixed["scan.c"]])

    out, views, loop, evaluations = search(problem_dir, cpu_config, tmp_path, model, iterations=2, tune_evaluations=3)
    tuned = points(views)
    # three points, the template's defaults first; each an ordinary design judged by the harness
    assert len(tuned) == 3, [v.tags for v in views]
    assert tuned[0].tags[TAG_PARAMS] == {"BLOCK": 4, "GROUP": 8, "ACC": "unsigned long long"}
    assert len({json.dumps(v.tags[TAG_PARAMS], sort_keys=True) for v in tuned}) == 3
    assert len({v.tags[TAG_TEMPLATE] for v in tuned}) == 1
    for v in tuned:
        assert v.author == "implementor-1" and v.parents == () and v.iteration == 1  # innovate: no parent
        assert v.tags[TAG_HANDOFF]["author"] == "implementor-1" and v.tags[TAG_HANDOFF]["of"] == 3
        assert "{{" not in v.source and "stratagem: tuned BLOCK" in v.source
        assert v.status in ("valid", "unstable", "unreviewed", "invalid")
    # charged to the run: every point is an evaluation of the run's spend
    assert loop.session.spend.evaluations == evaluations >= 3
    # the Implementor got the best point's verdict headed by every point's: one answer, one turn
    assert len(model.prompts["implementor"]) >= 2  # iteration 1's template, iteration 2's fixed design
    # the next prompt (iteration 2's Strategist) shows the points with their parameters
    second = model.prompts["strategist"][1]
    assert "tuned from a template: BLOCK=" in second and "the template implementor-1 wrote" in second
    # the report's and compare's "where the best came from" counts them as tuned points
    study = tuning(views)
    assert study is not None and len(study.points) == 3
    share = shares(views, study)
    if share is not None:  # a written design passed too
        assert share.tuned == 3 and share.template_authors == ("implementor-1",)
    assert out.stop_reason.startswith("iterations")


def test_a_budget_smaller_than_the_points_stops_tuning(problem_dir: Path, cpu_config: EvaluationConfig,
                                                         tmp_path: Path) -> None:
    model = Scripted([TEMPLATE])
    out, views, _, _ = search(problem_dir, cpu_config, tmp_path, model, iterations=2, tune_evaluations=5,
                           max_gpu_seconds=0.01)
    tuned = points(views)
    assert len(tuned) == 1 and tuned[0].tags[TAG_HANDOFF]["of"] == 5  # one point, then the budget was spent
    assert "max_gpu_seconds" in out.stop_reason


def test_an_invalid_template_is_recorded_and_fed_back_and_zero_evaluates_the_defaults(
        problem_dir: Path, cpu_config: EvaluationConfig, tmp_path: Path) -> None:
    model = Scripted([UNSATISFIABLE, TEMPLATE])
    _, views, _, _ = search(problem_dir, cpu_config, tmp_path, model, tune_evaluations=0)
    refused = [v for v in views if v.source == UNSATISFIABLE]
    assert len(refused) == 1 and refused[0].status == "invalid"
    assert "no point of the space" in refused[0].report and "[template]" in refused[0].report
    # fed back: the Implementor's next prompt is that report
    assert len(model.prompts["implementor"]) == 2
    assert "no point of the space" in model.prompts["implementor"][1]
    # tuning off: the valid template's defaults, evaluated once as one design
    tuned = points(views)
    assert len(tuned) == 1 and tuned[0].tags[TAG_PARAMS]["BLOCK"] == 4
    assert tuned[0].source.count("#define BLOCK 4\n") == 1


@dataclass
class Recorder:
    """A Session that records what it evaluates (no harness): each design valid, faster with BLOCK
    nearer 32."""

    evaluated: list[dict[str, object]] = field(default_factory=list)
    spent: bool = False
    state: dict[str, object] = field(default_factory=dict)

    async def evaluate(self, source: str, *, strategy: str, parents=(), author: str = "", tags=None,
                       files=None) -> Feedback:
        self.evaluated.append(dict(tags or {}))
        block = int((tags or {}).get(TAG_PARAMS, {}).get("BLOCK", 4))
        return Feedback(Design(files={"scan.c": source}).id, "valid", "All validators passed.", 1.0,
                        10.0 / (abs(block - 32) + 1))

    def budget_remaining(self) -> Remaining:
        return Remaining(gpu_seconds=0.0 if self.spent else None)

    def save_state(self, key: str, value: object) -> None:
        self.state[key] = value

    def set_status(self, worker: str, status: str) -> None:
        pass

    def tag(self, design_id: str, **tags: object) -> None:
        pass


def test_a_template_handed_off_again_continues_its_study(problem_dir: Path) -> None:
    """Unit level (no harness): a fixed design passes through; a template is tuned for its points
    and a second hand-off of the same template continues its study (no point twice)."""
    problem = load_problem(problem_dir)
    rec = Recorder()
    s = HandoffSession(rec, problem, HandoffSettings(evaluations=4))  # type: ignore[arg-type]
    fb = asyncio.run(s.evaluate("int x;\n", strategy="innovate", author="a"))
    assert fb.status == "valid" and rec.evaluated == [{}]
    first = asyncio.run(s.evaluate(TEMPLATE, strategy="innovate", author="a"))
    second = asyncio.run(s.evaluate(TEMPLATE, strategy="innovate", author="a"))
    blocks = [t[TAG_PARAMS]["BLOCK"] for t in rec.evaluated[1:]]  # type: ignore[index]
    assert blocks[0] == 4 and len(blocks) == 5 == len(set(blocks))  # the space has 5 points: all, once
    assert "tuned it" in first.report and first.speedup is not None
    assert "4 points of this template were known from before" in second.report
    rec.spent = True  # a spent device budget: one point (the first is always evaluated), then stop
    other = TEMPLATE.replace("choice(8)", "choice(8, 16)")
    third = asyncio.run(s.evaluate(other, strategy="innovate", author="a"))
    assert len(rec.evaluated) == 7 and "max_gpu_seconds budget is spent" in third.report


def test_a_pike_optimizers_template_is_tuned(problem_dir: Path, cpu_config: EvaluationConfig, tmp_path: Path) -> None:
    """PIKE-B's optimizer answers with a template in its code block: the slot's design is the best
    point (it carries the slot's tag), every point a design of the slot's writer."""

    def optimizer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(f"A template:\n```text\n{TEMPLATE}```\n")])

    cfg = resolved_config(load_config(None, {
        "search": {"policy": "pike-b", "max_queries": 1, "confirm_top": 0, "tune_evaluations": 2},
        "agents": {"model": "test"},
        "policies": {"pike-b": {"num_branches": 1, "queries_per_phase": 1, "brainstorm": False,
                                "max_fix_attempts": 0}}}))
    cfg = cfg.model_copy(update={"evaluation": cpu_config})
    problem = load_problem(problem_dir)
    ev = Evaluator(cpu_config, LocalExecutor.for_devices(["cpu"], cpu_config, environment()), "cpu")
    with RunStore.open(tmp_path / "run") as store:
        store.add_problem(problem)
        store.start_run(problem.id, "pike-b", cfg.model_dump(mode="json"))
        policy = PikeBPolicy(cfg, problem, tmp_path / "work", RoleModels.of({"default": FunctionModel(optimizer)}),
                             policy_settings(cfg))  # type: ignore[arg-type]
        asyncio.run(SearchLoop(RunSession(cfg, problem, store, ev, policy)).run())
        views = st.stored_views(store)
    tuned = points(views)
    assert [v.tags[TAG_PARAMS]["BLOCK"] for v in tuned][0] == 4 and len(tuned) == 2
    assert all(v.strategy == "tuned point" for v in tuned)  # how each was made
    slotted = [v for v in tuned if any(k.startswith("slot ") for k in v.tags)]
    assert len(slotted) == 1  # the slot's design: the best point


def test_where_the_best_came_from_names_the_templates_author() -> None:
    tuned = DesignView("a" * 64, "int a;\n", "valid", runtime_ms=1.0, speedup=3.0, speedup_low=2.9, speedup_high=3.1,
                       author="implementor-1", created_at=1.0,
                       tags={TAG_PARAMS: {"BLOCK": 32}, TAG_HANDOFF: {"author": "implementor-1", "point": 2, "of": 3}})
    written = DesignView("b" * 64, "int b;\n", "valid", runtime_ms=1.5, speedup=2.0, speedup_low=1.9,
                         speedup_high=2.1, author="implementor-2", created_at=2.0)
    study = tuning([tuned, written])
    assert study is not None
    share = shares([tuned, written], study)
    assert share is not None and share.from_tuner and share.template_authors == ("implementor-1",)
    assert "the tuner, tuning a template implementor-1 wrote" in share.sentence()
    assert share.to_json()["best_template_author"] == "implementor-1"
