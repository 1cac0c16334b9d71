"""AutoPolicy.iterate end to end with scripted models and a fake Session."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agent_fakes import (
    GOOD_SOURCE,
    WRONG_SOURCE,
    FakeSession,
    call_tool,
    design_id,
    full_config,
    no_sleep,
    output,
    problem,
    scripted,
    state,
    text,
    tool_returns,
    user_prompts,
    valid_if,
)
from pydantic_ai.exceptions import ModelAuthenticationError, ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from stratagem.config import load_config
from stratagem.context.curate import (
    CHARS_PER_TOKEN,
    PER_DESIGN_OVERHEAD_CHARS,
    TEMPLATE_OVERHEAD_CHARS,
)
from stratagem.core.search import DesignView, Feedback, Policy
from stratagem.errors import HarnessError
from stratagem.search.policies.auto import AutoIterationResult, AutoPolicy


def implementor_fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """First answer wrong; after feedback, the fix (each implementor in its own conversation)."""
    fixed = any("did not pass. The validators reported" in p for p in user_prompts(messages))
    return output(info, {"source": GOOD_SOURCE if fixed else WRONG_SOURCE, "notes": "n"})


def plan_fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return output(info, {"strategy": "innovate", "evidence": [], "rationale": "start",
                         "instructions": "use F.gelu(approximate='tanh')",
                         "variants": ["one fused kernel", "two kernels, the second in place"]})


def policy(tmp_path: Path, models: dict, **agents) -> AutoPolicy:
    cfg = full_config(max_retries=0, **agents)
    return AutoPolicy.from_config(cfg, problem(), tmp_path, models=models, sleep=no_sleep)


def test_iterate_plan_and_two_implementors(tmp_path: Path) -> None:
    pol = policy(tmp_path, {"strategist": FunctionModel(plan_fn),
                            "implementor": FunctionModel(implementor_fn)})
    typed: Policy = pol  # structurally a Policy
    assert typed.name == "auto"
    session = FakeSession(verdict=valid_if(lambda s: s == GOOD_SOURCE))
    res = asyncio.run(pol.iterate(state(), session))
    assert isinstance(res, AutoIterationResult)
    assert res.plan is not None and res.plan.strategy == "innovate"
    assert set(res.design_ids) == {design_id(WRONG_SOURCE), design_id(GOOD_SOURCE)}
    assert sorted(e["author"] for e in session.evaluations) == [
        "implementor-1", "implementor-1", "implementor-2", "implementor-2"]
    assert [c.role for c in session.calls].count("implementor") == 4
    assert [c.role for c in session.calls][0] == "strategist"
    assert all(r.ok for r in res.implementors)
    assert set(res.context_ids) == {"best", "worst", "recent", "failed"}
    assert not res.exhausted and res.strategist_ok
    assert ("strategist", "plan: innovate") in session.statuses


@pytest.mark.parametrize("variants, runs", [(["block 32", "block 64", "block 128"], 2), (["block 32"], 1), ([], 1)])
def test_each_variant_reaches_its_own_implementor(tmp_path: Path, variants, runs) -> None:
    firsts: dict[str, str] = {}

    def plan(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        return output(i, {"strategy": "innovate", "evidence": [], "rationale": "r", "instructions": "fuse",
                          "variants": variants})

    def impl(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        first = user_prompts(m)[0]
        firsts[first.split("\n")[0]] = first
        return output(i, {"source": GOOD_SOURCE, "notes": "n"})

    pol = policy(tmp_path, {"strategist": FunctionModel(plan), "implementor": FunctionModel(impl)})
    res = asyncio.run(pol.iterate(state(), FakeSession(verdict=valid_if(lambda s: True))))
    if len(variants) > 2:  # more variants than Implementors: the Strategist is asked again, then fails
        assert not res.strategist_ok
        return
    assert len(res.implementors) == runs == len(firsts)
    for k, variant in enumerate(variants, start=1):
        assert "Your variant" in firsts[f"# Task for implementor-{k}"] and variant in firsts[f"# Task for implementor-{k}"]
    assert res.plan.variants == tuple(variants)


def test_the_strategist_sees_the_curated_designs_and_can_ask_the_analyst(tmp_path: Path) -> None:
    good = DesignView(design_id(GOOD_SOURCE), GOOD_SOURCE, "valid", 1, runtime_ms=0.5, speedup=3.0,
                      created_at=1.0)
    seen: dict[str, list[str]] = {}

    def second(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        seen["answers"] = tool_returns(m, "ask_analyst")
        seen["prompt"] = user_prompts(m)
        return output(i, {"strategy": "refine", "evidence": [good.id[:10]], "rationale": "r",
                          "instructions": "vectorize"})

    strategist = scripted(lambda m, i: call_tool("ask_analyst", {"question": "what is best?"}),
                          second)
    analyst = scripted(lambda m, i: text("the gelu rewrite"))
    pol = policy(tmp_path, {"strategist": strategist, "analyst": analyst,
                            "implementor": FunctionModel(implementor_fn)})
    session = FakeSession()
    res = asyncio.run(pol.iterate(state([good], 2), session))
    assert res.plan is not None and res.plan.evidence == (good.id,)
    assert seen["answers"] == ["the gelu rewrite"]
    assert good.id[:12] in seen["prompt"][0]
    assert [c.role for c in session.calls][:2] == ["analyst", "strategist"]
    assert all(e["parents"] == (good.id,) for e in session.evaluations)


def test_strategist_failure_falls_back_to_refining_the_best(tmp_path: Path) -> None:
    def down(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        raise ModelHTTPError(503, "m")

    best = DesignView(design_id(GOOD_SOURCE), GOOD_SOURCE, "valid", 1, runtime_ms=0.5, speedup=3.0)
    pol = policy(tmp_path, {"strategist": FunctionModel(down),
                            "implementor": FunctionModel(implementor_fn)})
    session = FakeSession()
    res = asyncio.run(pol.iterate(state([best], 2), session))
    assert res.plan is not None and res.plan.strategy == "refine"
    assert res.plan.evidence == (best.id,)
    assert "strategist failed" in res.note and not res.strategist_ok
    assert len(session.evaluations) == 2  # the implementors still ran
    first = pol.fallback_plan(state(), "x")
    assert first.strategy == "innovate" and first.evidence == ()


def test_an_unusable_model_exhausts_the_policy(tmp_path: Path) -> None:
    def denied(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        raise ModelHTTPError.for_category(ModelAuthenticationError, status_code=401,
                                          model_name="m")

    pol = policy(tmp_path, {"default": FunctionModel(denied)})
    session = FakeSession()
    res = asyncio.run(pol.iterate(state(), session))
    assert res.exhausted and "unusable" in res.note
    assert session.evaluations == []
    assert all(not c.ok for c in session.calls)


def test_budget_exhausted_before_planning(tmp_path: Path) -> None:
    pol = policy(tmp_path, {"default": FunctionModel(plan_fn)})
    session = FakeSession(exhausted="queries")
    res = asyncio.run(pol.iterate(state(), session))
    assert res.plan is None and "queries" in res.note and session.calls == []


def test_broken_harness_propagates(tmp_path: Path) -> None:
    def broken(source: str) -> Feedback:
        raise HarnessError("worker could not start")

    pol = policy(tmp_path, {"strategist": FunctionModel(plan_fn),
                            "implementor": FunctionModel(implementor_fn)})
    with pytest.raises(HarnessError):
        asyncio.run(pol.iterate(state(), FakeSession(verdict=broken)))


def test_review_runs_the_analyst_or_nothing(tmp_path: Path) -> None:
    fast = DesignView(design_id(GOOD_SOURCE), GOOD_SOURCE, "valid", 1, runtime_ms=0.01,
                      speedup=50.0)
    reviewer = scripted(lambda m, i: output(i, {"cheating": False, "reason": "fused gelu"}))
    pol = policy(tmp_path, {"review": reviewer, "default": FunctionModel(plan_fn)})
    session = FakeSession()
    review = asyncio.run(pol.review(fast, state([fast], 2), session))
    assert review is not None and not review.cheating and review.reason == "fused gelu"
    assert [c.role for c in session.calls] == ["analyst"]
    off = policy(tmp_path, {"default": FunctionModel(plan_fn)}, analyst=False)
    assert asyncio.run(off.review(fast, state([fast], 2), session)) is None


def test_test_model_completes_an_iteration(tmp_path: Path) -> None:
    cfg = full_config()
    pol = AutoPolicy.from_config(cfg, problem(), tmp_path)
    session = FakeSession()
    res = asyncio.run(pol.iterate(state(), session))
    assert res.plan is not None and res.plan.strategy == "innovate"
    assert len(res.design_ids) == 1  # both implementors echo the reference as ModelNew
    assert all(r.ok for r in res.implementors)
    assert all(c.ok for c in session.calls)
    assert "class ModelNew" in session.evaluations[0]["source"]
    again = asyncio.run(pol.iterate(state([], 2), session))
    assert again.plan is not None
    review = asyncio.run(pol.review(
        DesignView(res.design_ids[0], "x", "valid", speedup=20.0, runtime_ms=1.0),
        state(), session))
    assert review is not None and not review.cheating


def test_over_budget_the_implementor_keeps_the_cited_best_whole_and_a_long_designs_new_part(
    tmp_path: Path,
) -> None:
    # issue 44 item 4: the cited designs no longer split the budget equally; the best stays
    # whole, and a design that must be shortened keeps what it changed from its parent
    def steps(tag: str, n: int) -> list[str]:
        return [f"        y = op_{tag}_{i}(y)  # step {i} of the {tag} pipeline, as written" for i in range(n)]

    def view(lines: list[str], speedup: float, at: float, parents: tuple[str, ...] = ()) -> DesignView:
        source = "class ModelNew:\n    def forward(self, y):\n" + "\n".join(lines) + "\n        return y\n"
        return DesignView(design_id(source), source, "valid", 1, parents=parents, runtime_ms=1.0 / speedup,
                          speedup=speedup, created_at=at)

    base = steps("old", 160)
    parent = view(base, 1.1, 1.0)
    new_part = [f"        y = fused_down_projection_{i}(y, self.w{i})  # the new kernel, part {i}" for i in range(8)]
    long = view(base[:80] + new_part + base[80:], 1.3, 2.0, parents=(parent.id,))
    best = view(steps("best", 100), 2.0, 3.0)
    run = state([parent, long, best], 2)
    reserved = len(run.problem.source) + sum(len(r) + 3 for r in run.rules) + TEMPLATE_OVERHEAD_CHARS
    room = len(best.source) + len(long.source) // 2 + 2 * PER_DESIGN_OVERHEAD_CHARS
    cfg = load_config(None, {"agents": {"model": "test", "max_retries": 0},
                             "search": {"implementors": 1, "seed": 7},
                             "context": {"token_budget": (reserved + room) // CHARS_PER_TOKEN}})
    firsts: list[str] = []

    def plan(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        return output(i, {"strategy": "refine", "evidence": [best.id[:12], long.id[:12]], "rationale": "r",
                          "instructions": "bring the new kernel into the best design"})

    def impl(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        firsts.append(user_prompts(m)[0])
        return output(i, {"source": GOOD_SOURCE, "notes": "n"})

    pol = AutoPolicy.from_config(cfg, problem(), tmp_path, sleep=no_sleep,
                                 models={"strategist": FunctionModel(plan), "implementor": FunctionModel(impl)})
    res = asyncio.run(pol.iterate(run, FakeSession()))
    assert res.plan is not None and res.plan.evidence == (best.id, long.id)
    prompt = firsts[0]
    assert best.source.strip() in prompt  # the cited best, whole
    assert all(line in prompt for line in new_part)  # the long design's new part, whole
    assert "lines as in its parent, cut to fit the context budget" in prompt
    assert base[79] in prompt and base[80] in prompt  # the unchanged lines beside it stay
    assert base[0] not in prompt and base[-1] not in prompt  # the farthest are cut first


def test_each_implementor_sees_the_run_s_best_and_the_attempts_since_its_plan_s_design(tmp_path: Path) -> None:
    # issue 59 item 1: the plan cites a weak design; the prompt still shows the run's best (with
    # its code, in the context budget) and the newer attempts, whoever made them
    def view(tag: str, speedup: float | None, at: float, iteration: int) -> DesignView:
        source = f"class ModelNew:  # {tag}\n    pass\n"
        status = "valid" if speedup else "invalid"
        return DesignView(design_id(source), source, status, iteration, "refine", "implementor-1",
                          runtime_ms=1.0 / speedup if speedup else None, speedup=speedup, created_at=at,
                          report="" if speedup else "[correctness] wrong: max abs diff 0.5")

    weak, best, newer = view("weak", 1.05, 1.0, 1), view("best", 2.0, 2.0, 1), view("newer", None, 3.0, 2)
    firsts: list[str] = []

    def plan(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        return output(i, {"strategy": "refine", "evidence": [weak.id[:12]], "rationale": "r", "instructions": "x"})

    def impl(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        firsts.append(user_prompts(m)[0])
        return implementor_fn(m, i)

    cfg = full_config(max_retries=0)
    cfg = cfg.model_copy(update={"search": cfg.search.model_copy(update={"implementors": 1})})
    pol = AutoPolicy.from_config(cfg, problem(), tmp_path, sleep=no_sleep,
                                 models={"strategist": FunctionModel(plan), "implementor": FunctionModel(impl)})
    session = FakeSession(verdict=valid_if(lambda s: s == GOOD_SOURCE))
    asyncio.run(pol.iterate(state([weak, best, newer], 3), session))
    run = firsts[0].split("# What the whole run has found so far")[1]
    assert f"`{best.id[:12]}` (refine): valid, 2.00x" in run
    assert "# best" in firsts[0]  # the best's code, though the plan did not cite it
    assert f"`{newer.id[:12]}` (refine): invalid: [correctness] wrong" in run  # made since the plan's design
    # issue 59 item 6: the answer after a failure report is labelled a fix
    assert [e["strategy"] for e in session.evaluations] == ["refine", "fix"]


def test_each_implementor_sees_what_the_others_asked_with_it_attempt(tmp_path: Path) -> None:
    # issue 59: Implementors asked at once see each other's variants, in flight
    firsts: dict[str, str] = {}

    def impl(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        first = user_prompts(m)[0]
        firsts[first.split("\n")[0]] = first
        return output(i, {"source": GOOD_SOURCE, "notes": "n"})

    pol = policy(tmp_path, {"strategist": FunctionModel(plan_fn), "implementor": FunctionModel(impl)})
    asyncio.run(pol.iterate(state(), FakeSession(verdict=valid_if(lambda s: True))))
    one, two = firsts["# Task for implementor-1"], firsts["# Task for implementor-2"]
    flying = "Attempts asked beside yours, in flight (not measured yet)"
    assert "- two kernels, the second in place: implementor-2 (innovate)" in one.split(flying)[1]
    assert "- one fused kernel: implementor-1 (innovate)" in two.split(flying)[1]
    assert "implementor-1 (innovate)" not in one.split(flying)[1]


def test_an_implementor_s_fix_round_is_told_what_the_others_measured_since(tmp_path: Path) -> None:
    # issue 59: a later turn of a conversation learns the other Implementors' results
    later: list[str] = []

    async def impl(m: list[ModelMessage], i: AgentInfo) -> ModelResponse:
        prompts = user_prompts(m)
        if "# Task for implementor-2" in prompts[0]:
            return output(i, {"source": GOOD_SOURCE, "notes": "n"})
        if len(prompts) == 1:
            await asyncio.sleep(0.05)  # implementor-2 is measured first
            return output(i, {"source": WRONG_SOURCE, "notes": "n"})
        later.append(prompts[-1])
        return output(i, {"source": GOOD_SOURCE + "\n_FIXED = 1\n", "notes": "n"})

    pol = policy(tmp_path, {"strategist": FunctionModel(plan_fn), "implementor": FunctionModel(impl)})
    session = FakeSession(verdict=valid_if(lambda s: s != WRONG_SOURCE))
    asyncio.run(pol.iterate(state(), session))
    [feedback] = later
    assert "did not pass. The validators reported" in feedback
    news = feedback.split("Measured by the other writers since your task began")[1]
    assert f"`{design_id(GOOD_SOURCE)[:12]}` (innovate): valid, 3.00x" in news
    assert design_id(WRONG_SOURCE)[:12] not in news  # its own design is the report above
