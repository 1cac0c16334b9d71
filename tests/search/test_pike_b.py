"""PIKE-B end to end on the fake evaluator with a scripted FunctionModel: the query accounting
(brainstorm and fixes counted, the budget never exceeded with parallel queries), the 3/3/2/2
split of each later phase over the previous phase's top 4, the fix rounds and their prompts."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest
from fakes import FakeEvaluator
from pike_fakes import Script, make_pike_loop

from stratagem.agents.pike import Tickets, extract_code, parse_ideas
from stratagem.core.search import DesignView
from stratagem.search.policies.pike_b import library, select_seeds, split_counts
from stratagem.search.policies.pike_settings import PikeBSettings


def test_every_query_is_counted_and_the_budget_is_never_exceeded(tmp_path):
    script = Script(bad=lambda n: n % 3 == 0)
    loop, store, _ = make_pike_loop(tmp_path, "pike-b", script, max_queries=37,
                                    evaluator=FakeEvaluator(delay_s=0.01))
    out = asyncio.run(loop.run())
    assert out.stop_reason.startswith("max_queries (37 of 37)")
    calls = store.agent_calls()
    assert sum(c.requests for c in calls) == 37 == len(script.calls)
    roles = Counter(c.role for c in calls)
    assert roles["brainstorm"] == 1  # the brainstorm is charged, once
    assert roles["fix"] >= 3 and roles["optimize"] + roles["fix"] == 36
    # every stored design came from one recorded query (none lost, none unrecorded)
    assert len(store.designs()) <= 36
    assert out.best is not None and out.best.speedup > 1.5


def test_phase_one_splits_ten_queries_over_the_top_four_as_3_3_2_2(tmp_path):
    script = Script()
    loop, store, _ = make_pike_loop(tmp_path, "pike-b", script, max_queries=21)
    asyncio.run(loop.run())
    phase1 = store.policy_state("pike-b/phase/1")
    parents = [s["parent"] for s in phase1["slots"]]
    counts = list(Counter(parents).values())
    assert counts == [3, 3, 2, 2]
    # the seeds are the four fastest of phase 0, fastest first, with branch ids 0..3
    views = {d.id: d for d in loop.session.views()}
    phase0 = [v for v in views.values() if any(k.startswith("slot p0/") for k in v.tags)]
    fastest = [v.id for v in sorted(phase0, key=lambda v: -(v.speedup or 0))[:4]]
    assert list(dict.fromkeys(parents)) == fastest
    assert [s["branch"] for s in phase1["slots"]] == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]
    improve = [p for r, p in script.calls[11:] if r == "optimize"]
    assert improve and all("You generated the following working solution previously" in p for p in improve)


def test_phase_zero_asks_one_query_per_brainstormed_idea(tmp_path):
    script = Script(ideas=3)  # fewer ideas than branches: the rest get distinct generic directions
    loop, store, _ = make_pike_loop(tmp_path, "pike-b", script, max_queries=11)
    asyncio.run(loop.run())
    first = [p for r, p in script.calls if r == "optimize"][:10]
    focus = [p.split("Focus specifically on the following optimization task:")[1].strip().splitlines()[0]
             for p in first]
    assert len(set(focus)) == 10 and focus[:3] == ["idea number 0", "idea number 1", "idea number 2"]
    assert store.policy_state("pike-b/ideas")["ideas"][:4] == ["idea number 0", "idea number 1",
                                                                "idea number 2", "idea number 0"]


def test_failing_candidates_get_exactly_max_fix_rounds_with_the_max_difference(tmp_path):
    script = Script(bad=lambda n: True, fix_fails=True)
    loop, store, _ = make_pike_loop(tmp_path, "pike-b", script, max_queries=31,
                                    settings={"num_branches": 2, "max_fix_attempts": 3})
    asyncio.run(loop.run())
    fixes = [p for r, p in script.calls if r == "fix"]
    assert len(fixes) >= 6
    phase0 = [c for c in script.calls[1:9]]
    assert Counter(r for r, _ in phase0) == {"optimize": 2, "fix": 6}  # 2 slots x 3 rounds
    assert all("Fix the correctness issue" in p and "max abs 0.5" in p for p in fixes)
    # each fix is stored as the child of the attempt it fixes, round by round
    views = loop.session.views()
    chain = sorted((v for v in views if "slot p0/s0" in v.tags), key=lambda v: v.tags["slot p0/s0"]["round"])
    assert [v.tags["slot p0/s0"]["round"] for v in chain] == [0, 1, 2, 3]
    assert all(b.parents == (a.id,) for a, b in zip(chain, chain[1:], strict=False))
    assert [v.strategy for v in chain] == ["initial", "fix", "fix", "fix"]  # how each was made


def test_an_answer_without_code_is_kept_and_fixed(tmp_path):
    script = Script(no_code=lambda n: n == 2)
    loop, store, _ = make_pike_loop(tmp_path, "pike-b", script, max_queries=12,
                                    settings={"num_branches": 1})
    asyncio.run(loop.run())
    assert script.roles()[:3] == ["brainstorm", "optimize", "fix"]
    assert "I would fuse the operators." in store.design_source(store.designs()[0].id)


def test_the_run_records_the_policy_and_its_full_configuration(tmp_path):
    loop, store, _ = make_pike_loop(tmp_path, "pike-b", Script(), max_queries=11)
    cfg = store.run().config
    assert cfg["policies"]["pike-b"]["top_k"] == 4 and cfg["policies"]["pike-b"]["selector"] == "top-k"
    assert cfg["search"]["max_queries"] == 11 and cfg["search"]["patience"] is None


def test_the_query_budget_defaults_to_300_when_none_is_given(tmp_path):
    loop, store, _ = make_pike_loop(tmp_path, "pike-b", Script())
    assert store.run().config["search"]["max_queries"] == 300
    assert loop.session.progress.iterations == 0  # no iteration limit: the live view shows no count
    limited, _, _ = make_pike_loop(tmp_path / "b", "pike-b", Script(), iterations=4)
    assert limited.session.progress.iterations == 4


def test_split_counts_and_every_selector():
    assert split_counts(10, 4) == [3, 3, 2, 2] and split_counts(10, 1) == [10] and split_counts(3, 4) == [1, 1, 1, 0]
    lib = [DesignView(id=f"d{i}", source="", status="valid", speedup=5.0 - i) for i in range(6)]
    rng = random.Random(0)
    for sel in ("top-k", "elite-diverse", "tournament", "roulette"):
        seeds = select_seeds([*lib, None], 10, PikeBSettings(selector=sel), rng)
        assert len(seeds) == 10 and all(rank == (lib + [None]).index(v) for rank, v in seeds)
    elite = select_seeds([*lib, None], 10, PikeBSettings(selector="elite-diverse"), random.Random(1))
    assert all(rank < 4 for rank, _ in elite[:3])
    tour = select_seeds([*lib, None], 50, PikeBSettings(selector="tournament"), random.Random(2))
    assert Counter(rank for rank, _ in tour).most_common(1)[0][0] <= 1  # the fittest win most often
    assert select_seeds([], 4, PikeBSettings(), rng) == [(0, None)] * 4  # nothing valid: the original


def test_tickets_bound_what_a_phase_asks():
    t = Tickets(2)
    assert t.take() and t.take() and not t.take() and t.left == 0


def test_code_extraction_and_idea_parsing():
    assert extract_code("x\n```python\nclass ModelNew: pass\n```\n```python\nsecond\n```") == "class ModelNew: pass\n"
    assert extract_code("```cpp\nint f();\n```") == "int f();\n"
    assert extract_code("no code here") is None
    assert parse_ideas("Ideas:\n- a\n* b\n1. c\n2) d\nnot a bullet", 6) == ["a", "b", "c", "d", "a", "b"]
    assert parse_ideas("- a\n- b\n- c", 2) == ["a", "b"] and parse_ideas("nothing", 3) == []


@pytest.mark.parametrize("selector", ["elite-diverse", "tournament", "roulette"])
def test_every_selector_runs_a_search(tmp_path, selector):
    loop, store, _ = make_pike_loop(tmp_path, "pike-b", Script(), max_queries=25, settings={"selector": selector})
    out = asyncio.run(loop.run())
    assert out.best is not None and sum(c.requests for c in store.agent_calls()) == 25


def test_the_library_puts_each_branch_s_best_first_and_keeps_designs_two_phases_share():
    def view(i, speed, *slots):
        return DesignView(id=f"d{i}", source="", status="valid", speedup=speed, created_at=float(i),
                          tags={f"slot p{p}/s{s}": {"round": 0, "phase": p, "branch": b} for p, s, b in slots})

    designs = [view(0, 3.0, (1, 0, 0)), view(1, 2.5, (1, 1, 0)), view(2, 2.0, (1, 2, 1)),
               view(3, 4.0, (0, 0, 0)), view(4, 1.5, (0, 3, 2), (1, 3, 2))]
    lib = library(designs, 1, "phase")
    assert [v.id for v in lib] == ["d0", "d2", "d4", "d1"]  # branch bests (0, 1, 2), then the rest
    assert [v.id for v in library(designs, 0, "phase")] == ["d3", "d4"]
    assert library(designs, 1, "all")[0].id == "d3"
