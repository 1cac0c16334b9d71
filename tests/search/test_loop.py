"""The run loop with a scripted policy and a marker-reading evaluator: storage, stop rules,
budgets, reviews, duplicate designs, cancellation and recovery of a killed run."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from fakes import FakeEvaluator, ScriptedPolicy, src

from stratagem.config import load_config
from stratagem.core.search import AgentCall, Review
from stratagem.domains.pytorch.domain import candidate_design
from stratagem.domains.pytorch.problem import load_problem
from stratagem.search import state as st
from stratagem.search.loop import SearchLoop
from stratagem.search.session import RunSession
from stratagem.store.sqlite import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests/fixtures/problem_relu.py"


def make_loop(tmp_path: Path, policy: ScriptedPolicy, evaluator: FakeEvaluator | None = None, **search):
    cfg = load_config(None, {"search": {"patience": 5, **search}})
    problem = load_problem(PROBLEM)
    store = RunStore.open(tmp_path / "run")
    store.add_problem(problem)
    store.start_run(problem.id, policy.name, cfg.model_dump(mode="json"))
    ev = evaluator or FakeEvaluator()
    return SearchLoop(RunSession(cfg, problem, store, ev, policy)), store, ev  # type: ignore[arg-type]


def test_iterations_are_stored_and_the_best_is_written(tmp_path):
    policy = ScriptedPolicy([[src("a", 0.8), src("b", invalid="wrong")], [src("c", 0.5)], [src("d", 0.6)]])
    loop, store, ev = make_loop(tmp_path, policy, iterations=3)
    out = asyncio.run(loop.run())
    assert out.stop_reason.startswith("iterations (3 of 3)")
    assert out.best is not None and out.best.source == src("c", 0.5)
    assert out.best.speedup == pytest.approx(2.0)
    written = out.best_path.read_text() if out.best_path is not None else ""
    assert written.startswith("# stratagem ") and src("c", 0.5).rstrip("\n") + "\n" in written  # header + source
    its = store.iterations()
    assert [i.n for i in its] == [1, 2, 3] and all(i.status == "done" for i in its)
    assert len(its[0].design_ids) == 2 and its[0].plan["strategy"] == "innovate"
    designs = store.designs()
    assert len(designs) == 4 and len(store.evaluations()) == 4
    assert designs[0].provenance == {"iteration": 1, "strategy": "innovate", "author": "implementor-1"}
    assert store.run().status == "finished"
    # The policy saw earlier iterations' designs with their verdicts.
    seen = policy.seen[2].designs
    assert {d.status for d in seen} == {"valid", "invalid"}
    assert next(d for d in seen if d.status == "invalid").report.startswith("[correctness] wrong_output: wrong")


def test_patience_stops_after_iterations_without_a_new_best(tmp_path):
    script = [[src("a", 0.5)], [src("b", 0.6)], [src("c", 0.7)], [src("d", 0.1)]]
    loop, store, _ = make_loop(tmp_path, ScriptedPolicy(script), iterations=10, patience=2)
    out = asyncio.run(loop.run())
    assert out.stop_reason.startswith("patience")
    assert len(store.iterations()) == 3  # 1 improved, 2 and 3 did not: stop before 4


def test_policy_exhaustion_stops_the_run(tmp_path):
    loop, store, _ = make_loop(tmp_path, ScriptedPolicy([[src("a", 0.5)]]), iterations=10)
    out = asyncio.run(loop.run())
    assert out.stop_reason == "the policy has nothing more to propose"
    assert len(store.designs()) == 1


def test_device_seconds_budget(tmp_path):
    script = [[src(f"{i}-{k}", 0.5 + i / 10 + k / 100) for k in range(2)] for i in range(5)]
    loop, store, ev = make_loop(tmp_path, ScriptedPolicy(script), FakeEvaluator(seconds_per_eval=1.0),
                                iterations=10, max_gpu_seconds=3)
    out = asyncio.run(loop.run())
    assert out.stop_reason.startswith("max_gpu_seconds")
    assert len(ev.calls) == 3  # the policy checks budget_left() before each evaluation


def test_query_and_money_budgets_count_agent_calls(tmp_path):
    class Calling(ScriptedPolicy):
        async def iterate(self, state, session):
            session.record_call(AgentCall(role="strategist", model="m", prompt_hash="h", input_tokens=100,
                                          output_tokens=50, requests=2, cost_usd=0.25, messages_json="[1]"))
            return await super().iterate(state, session)

    loop, store, _ = make_loop(tmp_path, Calling([[src(str(i), 1 - i / 10)] for i in range(9)]),
                               iterations=10, max_usd=0.6)
    out = asyncio.run(loop.run())
    assert out.stop_reason.startswith("max_usd")
    calls = store.agent_calls()
    assert len(calls) == 3 and calls[0].iteration == 1 and calls[0].cost_usd == 0.25
    assert store.get_artifact(calls[0].messages_hash) == "[1]"
    assert out.spend.queries == 6 and out.spend.tokens == 450


def test_the_same_source_is_evaluated_once(tmp_path):
    same = src("same", 0.5)
    loop, store, ev = make_loop(tmp_path, ScriptedPolicy([[same, same], [same]]), iterations=2)
    asyncio.run(loop.run())
    assert len(ev.calls) == 1 and len(store.designs()) == 1 and len(store.evaluations()) == 1


def test_baselines_are_measured_fresh_once_per_invocation_before_the_first_plan(tmp_path):
    script = [[src("bad", invalid="wrong")], [src("a", 0.8)], [src("b", 0.5)]]
    policy = ScriptedPolicy(script)
    loop, _, ev = make_loop(tmp_path, policy, iterations=3)
    asyncio.run(loop.run())
    assert ev.baselines == [True]  # measured afresh, never from a cache filled under other load
    assert policy.seen[0].reference_ms == {"eager": 1.0, "compile": 0.8}  # the first plan has them
    assert ev.refreshes == [False, False, False]  # evaluations use the invocation's baseline


def test_concurrent_identical_designs_share_one_evaluation(tmp_path):
    policy = ScriptedPolicy([[src("x", 0.5)]])

    async def go():
        loop, store, ev = make_loop(tmp_path, policy, FakeEvaluator(delay_s=0.05), iterations=1)
        loop.session.iteration = 1
        fbs = await asyncio.gather(*(loop.session.evaluate(src("x", 0.5), strategy="refine") for _ in range(3)))
        return fbs, ev, store

    fbs, ev, store = asyncio.run(go())
    assert len(ev.calls) == 1
    assert sorted(f.reused for f in fbs) == [False, True, True]
    assert {f.status for f in fbs} == {"valid"}


def test_a_too_good_design_judged_cheating_never_becomes_best(tmp_path):
    policy = ScriptedPolicy([[src("honest", 0.5)], [src("cheat SUSPECT", 0.01)]],
                            reviews={"SUSPECT": Review(cheating=True, reason="returns a cached tensor")})
    loop, store, _ = make_loop(tmp_path, policy, iterations=2)
    out = asyncio.run(loop.run())
    assert out.best is not None and "honest" in out.best.source
    assert [r.cheating for r in store.reviews()] == [True]
    flagged = [v for v in loop.session.views() if v.status == "flagged"]
    assert len(flagged) == 1 and "cached tensor" in flagged[0].report


def test_a_too_good_design_cleared_by_review_becomes_best(tmp_path):
    policy = ScriptedPolicy([[src("fast SUSPECT", 0.01)]],
                            reviews={"SUSPECT": Review(cheating=False, reason="fused kernel, looks right")})
    loop, store, _ = make_loop(tmp_path, policy, iterations=1)
    out = asyncio.run(loop.run())
    assert out.best is not None and out.best.speedup == pytest.approx(100.0)
    assert [r.cheating for r in store.reviews()] == [False]


class FlakyReviews(ScriptedPolicy):
    """The reviewer fails (an LLM error) the first `failures` times, then clears the design."""

    def __init__(self, script, failures: int) -> None:
        super().__init__(script)
        self.failures, self.asked = failures, 0

    async def review(self, design, state, session):
        self.asked += 1
        if self.asked <= self.failures:
            return Review(cheating=False, reason="review failed (timeout): no answer", failed=True)
        return Review(cheating=False, reason="fused kernel, looks right")


def test_a_too_good_design_whose_review_failed_is_not_best_until_a_retry_clears_it(tmp_path):
    script = [[src("honest", 0.5), src("fast SUSPECT", 0.01)], [src("other", 0.4)], [src("more", 0.45)]]
    policy = FlakyReviews(script, failures=2)
    loop, store, _ = make_loop(tmp_path, policy, iterations=3)
    asyncio.run(loop._iterate(1))
    fast = next(v for v in loop.session.views() if "SUSPECT" in v.source)
    assert fast.status == "unreviewed" and fast.runtime_ms == pytest.approx(0.01)
    assert "honest" in st.best_of(loop.session.views()).source  # not the unreviewed one
    # Iteration 2 retries the review first (fails again); iteration 3's retry clears it.
    asyncio.run(loop._iterate(2))
    assert "other" in st.best_of(loop.session.views()).source
    out = asyncio.run(loop.run())
    assert out.best is not None and "SUSPECT" in out.best.source
    assert [r.failed for r in store.reviews()] == [True, True, False]
    assert policy.asked == 3


def test_cancellation_marks_the_run_and_iteration_interrupted(tmp_path):
    loop, store, ev = make_loop(tmp_path, ScriptedPolicy([[src("a", 0.5), src("b", 0.4)]] * 3),
                                FakeEvaluator(delay_s=5), iterations=3)

    async def go():
        task = asyncio.create_task(loop.run())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert store.run().status == "interrupted"
    assert [i.status for i in store.iterations()] == ["interrupted"]
    # The design being evaluated was stored before its evaluation began.
    assert len(store.designs()) == 1 and store.evaluations() == []


def test_the_wall_budget_is_a_deadline_that_stops_work_in_flight(tmp_path):
    """`--max-wall-seconds` is a limit, not a check between steps: an evaluation still running
    when it ends is stopped there (it took 121.7 s of a 70 s budget when the run only checked
    between evaluations); the run finishes with the budget as its reason, and the design left
    unevaluated is pending for `resume`."""
    loop, store, ev = make_loop(tmp_path, ScriptedPolicy([[src("a", 0.5), src("b", 0.4)]] * 3),
                                FakeEvaluator(delay_s=30), iterations=3, max_wall_seconds=0.5)
    t0 = time.monotonic()
    out = asyncio.run(loop.run())
    assert time.monotonic() - t0 < 10
    assert out.stop_reason.startswith("max_wall_seconds (") and store.run().status == "finished"
    assert store.run().stop_reason == out.stop_reason
    assert any("stopped at the wall budget" in e for e in loop.session.progress.events)
    assert not loop.session.progress.inflight  # the live view shows nothing still running
    its = store.iterations()
    assert [i.status for i in its] == ["interrupted"] and "wall budget" in (its[0].note or "")
    assert len(store.designs()) == 1 and store.evaluations() == []
    assert [d.id for d in st.pending_designs(store.designs(), store.evaluations())] == [store.designs()[0].id]
    # resumed without the deadline: the pending design is evaluated first, then the search goes on
    cfg = load_config(None, {"search": {"patience": 5, "iterations": 2}})
    resumed = SearchLoop(RunSession(cfg, loop.problem, store, FakeEvaluator(),  # type: ignore[arg-type]
                                    ScriptedPolicy([[src("c", 0.25)]])))
    out = asyncio.run(resumed.run())
    assert store.evaluations()[0].design_id == store.designs()[0].id and store.run().status == "finished"
    assert out.best is not None and not st.pending_designs(store.designs(), store.evaluations())


def test_recovery_evaluates_stored_designs_once_and_continues(tmp_path):
    policy = ScriptedPolicy([[src("late", 0.3)]])
    loop, store, ev = make_loop(tmp_path, policy, iterations=3)
    # What a run killed mid-iteration leaves: an open iteration and a design never evaluated.
    store.start_iteration(1, {})
    orphan = candidate_design(src("orphan", 0.4), provenance={"iteration": 1, "strategy": "refine",
                                                                "author": "implementor-1"})
    store.add_design(loop.problem.id, orphan)
    out = asyncio.run(loop.run())
    assert ev.calls[0] == orphan.id and ev.calls.count(orphan.id) == 1
    its = store.iterations()
    assert its[0].status == "interrupted" and its[1].status == "done"
    assert len(store.designs()) == 2 and len(store.evaluations()) == 2
    assert out.best is not None and "late" in out.best.source


def test_a_broken_harness_stops_the_run_after_three_failures_in_a_row(tmp_path):
    from stratagem.errors import HarnessError

    broken = [src(f"h{i}", 0.5) + "# harness_error\n" for i in range(5)]
    script = [[broken[0], src("ok", 0.5), broken[1], broken[2]], [broken[3], broken[4]]]
    loop, store, ev = make_loop(tmp_path, ScriptedPolicy(script), iterations=5)
    with pytest.raises(HarnessError, match="3 evaluations in a row"):
        asyncio.run(loop.run())
    assert len(ev.calls) == 5  # h0, ok (resets the count), h1, h2, then h3 is the third in a row
    assert store.run().status == "interrupted"
    assert [i.status for i in store.iterations()] == ["done", "interrupted"]
