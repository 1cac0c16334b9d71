"""PIKE-B as its paper runs it (issue 24, item 6), on the fake evaluator with scripted models:
each role's own system prompt, the error prompt's device context, the fix rounds a phase
reserves under a tight budget, the library with the original program, distinct directions
for the slots of one seed, restatements seen through extension names, and notes that count
what happened."""

from __future__ import annotations

import asyncio
from collections import Counter

from fakes import src
from pike_fakes import WRONG_BY, Script, idea_asked, make_pike_loop
from pydantic_ai.exceptions import ModelHTTPError

from stratagem.context import pike as prompts
from stratagem.context.render import ProblemBrief
from stratagem.context.run_view import Direction
from stratagem.core.search import Feedback
from stratagem.search.policies.pike_b import phase0_tasks, start_order
from stratagem.search.policies.pike_slots import slot_directions

FOCUS = "following direction:"


def _phase_calls(script: Script, role: str = "optimize") -> list[str]:
    return [p for r, p in script.calls if r == role]


def test_each_role_has_its_own_system_prompt(tmp_path):
    script = Script(bad=lambda n: n == 2)  # the first code query is wrong: one fix
    loop, _, _ = make_pike_loop(tmp_path, "pike-b", script, max_queries=6, settings={"num_branches": 2})
    asyncio.run(loop.run())
    by_role = {r: i for r, i in script.instructions}
    assert set(by_role) == {"brainstorm", "optimize", "fix"}
    assert "brainstorming agent" in by_role["brainstorm"] and "bullet list" in by_role["brainstorm"]
    assert "Python file" not in by_role["brainstorm"] and "```python" not in by_role["brainstorm"]
    assert "performance engineering expert" in by_role["optimize"] and "complete Python file" in by_role["optimize"]
    assert "error-fixing agent" in by_role["fix"] and "complete Python file" in by_role["fix"]
    assert len({by_role["brainstorm"], by_role["optimize"], by_role["fix"]}) == 3
    for role in ("mutate", "crossover"):  # PIKE-O's code writers share the optimizer's
        assert prompts.instructions(role, domain="pytorch") == prompts.instructions("optimize", domain="pytorch")


def test_the_error_fixing_prompts_carry_the_device_and_the_rules():
    brief = ProblemBrief(name="relu", source="class Model: pass", device="cuda:0",
                         reference_ms={"eager": 0.12}, tolerances={"float32": {"atol": 1e-4, "rtol": 1e-4}},
                         integrity="strict", environment={"device_name": "NVIDIA H200", "capability": "9.0",
                                                          "torch": "2.8.0"}, domain="pytorch")
    crashed = Feedback("d1", "failed", "[load] compile_error: nvcc failed", kind="compile_error",
                       validator="load", error_tail="error: identifier x is undefined")
    wrong = Feedback("d2", "failed", "[correctness] wrong_output: mismatch", kind="wrong_output",
                     validator="correctness", max_abs_err=0.5)
    for fb in (crashed, wrong):
        text = prompts.fix(brief, "class ModelNew: pass", fb)
        assert "NVIDIA H200" in text and "compute capability 9.0" in text and "torch 2.8.0" in text
        assert "Integrity policy: strict" in text and "Tolerances" in text and "0.12" in text
    assert "identifier x is undefined" in prompts.fix(brief, "x", crashed)


def test_a_failing_candidate_keeps_its_fix_rounds_under_a_tight_budget(tmp_path):
    # Phase 0: two valid branches (3 queries with the brainstorm). Phase 1 plans 4 slots over 2
    # seeds (2/2) and every answer in it fails; 7 queries are left, 3 per slot (1 + 2 fixes).
    script = Script(bad=lambda n: n > 3, fix_fails=True)
    loop, store, _ = make_pike_loop(tmp_path, "pike-b", script, max_queries=10,
                                    settings={"num_branches": 2, "queries_per_phase": 4, "top_k": 2,
                                              "max_fix_attempts": 2})
    asyncio.run(loop.run())
    assert sum(c.requests for c in store.agent_calls()) == 10
    phase1 = script.roles()[3:]
    # Before: 4 improvement queries at once took 4 of the 7 and left 3 fixes for 4 failures.
    assert Counter(phase1) == {"optimize": 3, "fix": 4}
    views = loop.session.views()
    rounds = Counter(k for v in views for k in v.tags if k.startswith("slot p1/"))
    full = [k for k, n in rounds.items() if n == 3]
    assert len(full) == 2  # two slots had their first query and both fix rounds
    assert sorted(rounds.values()) == [1, 3, 3]  # the third got the run's last query
    plan = store.policy_state("pike-b/phase/1")["slots"]
    seeds_asked = {plan[int(k.split("/s")[1])]["parent"] for k in rounds}
    assert len(seeds_asked) == 2  # one slot of each seed first
    note = store.iterations()[-1].note
    assert "7 queries" in note and "1 of 4 slots not asked (no budget left)" in note and "0 valid designs" in note


def test_a_phase_draws_on_the_library_with_the_original_program(tmp_path):
    # Phase 0: three branches, two valid, one that stays wrong (no fix rounds). Phase 1's seeds
    # are the two valid designs and the original program; a budget of 3 queries reaches all three.
    script = Script(bad=lambda n: n == 4)
    loop, store, _ = make_pike_loop(tmp_path, "pike-b", script, max_queries=7,
                                    settings={"num_branches": 3, "max_fix_attempts": 0})
    asyncio.run(loop.run())
    plan = store.policy_state("pike-b/phase/1")["slots"]
    assert Counter(s["branch"] for s in plan) == {0: 4, 1: 3, 2: 3}
    assert [s["parent"] for s in plan if s["branch"] == 2] == [None] * 3  # the original program, rank 2
    improve = _phase_calls(script)[3:]
    assert len(improve) == 3
    assert sum("working solution previously (the original program)" in p for p in improve) == 1
    seeded = {d.id for d in store.designs()}
    assert sum(any(f"```python\n{store.design_source(i).strip()}\n```" in p for i in seeded) for p in improve) == 2


def test_the_slots_of_a_phase_get_distinct_directions_the_best_gain_first(tmp_path):
    script = Script(ideas=3)
    loop, store, _ = make_pike_loop(tmp_path, "pike-b", script, max_queries=26,
                                    settings={"num_branches": 4})
    asyncio.run(loop.run())
    plan = store.policy_state("pike-b/phase/1")["slots"]
    by_seed: dict[object, list[str]] = {}
    for s in plan:
        by_seed.setdefault(s["parent"], []).append(s["direction"])
    assert sorted(len(d) for d in by_seed.values()) == [2, 2, 3, 3]
    dirs = [s["direction"] for s in plan if s["direction"]]
    assert len(set(dirs)) == len(dirs)  # no two slots of the phase alike: parallel attempts differ
    # every phase-0 direction gained (each query's candidate is faster), so the directions are
    # handed out by gain: the best seed's first slot gets the one that gained most
    phase0 = [v for v in loop.session.views() if any(k.startswith("slot p0/") for k in v.tags)]
    top = max(phase0, key=lambda v: v.speedup or 0.0)
    assert plan[0]["direction"] == next(t["focus"] for k, t in top.tags.items() if k.startswith("slot p0/"))
    assert plan[0]["direction_why"].startswith("it produced gains in this run")
    assert all(s["direction_why"] for s in plan if s["direction"])
    improve = _phase_calls(script)[4:14]
    assert len(improve) == 10 and len(set(improve)) == 10


def test_the_paper_s_identical_prompts_on_request(tmp_path):
    script = Script(ideas=3)
    loop, store, _ = make_pike_loop(tmp_path, "pike-b", script, max_queries=21,
                                    settings={"num_branches": 10, "distinct_directions": False})
    asyncio.run(loop.run())
    first = _phase_calls(script)[:10]
    focus = [p.split("Focus specifically on the following optimization task:")[1].strip().splitlines()[0]
             for p in first]
    assert sorted(Counter(focus).values()) == [3, 3, 4]  # resize_list: the ideas repeated
    improve = _phase_calls(script)[10:20]
    assert len(set(improve)) == 4 and not any(FOCUS in p for p in improve)  # one prompt per seed


def test_phase_zero_fills_missing_ideas_with_distinct_directions():
    generic = ["g1", "g2", "idea b"]
    assert phase0_tasks(["idea a", "idea b", "idea a"], 5, generic) == ["idea a", "idea b", "g1", "g2", "idea a"]
    assert phase0_tasks(["idea a", "idea b"], 3, None) == ["idea a", "idea b", "idea a"]
    assert phase0_tasks([], 2, None) == []
    seeds = [(0, "a"), (0, "a"), (0, "a"), (1, "b"), (1, "b"), (2, None)]
    used: set[tuple[str | None, str]] = {("b", "x"), (None, "x")}  # asked in earlier phases
    pool = [Direction(t, "") for t in ["x", "y", "z", "w"]]

    def texts(ds: list[Direction | None]) -> list[str | None]:
        return [d.text if d else None for d in ds]

    dirs = texts(slot_directions([s for _, s in seeds], pool, used))
    assert dirs == ["x", "y", "z", "w", None, None]  # one direction per slot of a step; then spent
    assert texts(slot_directions(["b", "b"], pool, used)) == ["y", "z"]  # a later step: b was asked x and w
    assert texts(slot_directions(["b"], pool, used)) == [None]  # b's pool is spent
    assert slot_directions(["a"], [], set()) == [None]
    # a direction tried without a clear gain is not recycled: the seed's directions are spent
    assert slot_directions(["c"], [Direction("v", "", "even")], set()) == [None]
    assert start_order(seeds) == [0, 3, 5, 1, 4, 2]


EXT = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = """
#include <torch/extension.h>
torch::Tensor relu(torch::Tensor x) {
    return torch::relu(x);
}
"""
{var} = load_inline(name="{name}", cpp_sources=SRC, functions=["relu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return {var}.relu(x)

# runtime_ms=0.5
_MARKS = "runtime_ms=0.5"
'''


def test_a_restatement_under_another_extension_name_is_linked_not_evaluated(tmp_path):
    first = EXT.replace("{var}", "relu_ext").replace("{name}", "relu_ext")
    second = (EXT.replace("{var}", "fused_relu_v2").replace("{name}", "fused_relu_v2")
              .replace("    return torch::relu(x);", "    // the same kernel, commented\n    return torch::relu( x );"))

    def answer(role: str, prompt: str, n: int) -> str | None:
        if role == "optimize" and idea_asked(prompt) == 0:
            return f"```python\n{first}```"
        if role == "optimize" and idea_asked(prompt) == 1:
            return f"```python\n{second}```"
        return None

    script = Script(ideas=2, answer=answer)
    loop, store, ev = make_pike_loop(tmp_path, "pike-b", script, max_queries=3, settings={"num_branches": 2})
    asyncio.run(loop.run())
    designs = {d.id for d in store.designs()}  # (the reference's profile, asked beside the baselines, is no design)
    assert len([c for c in ev.calls if c in designs]) == 1 and len(designs) == 1  # the second only restated the first
    note = store.iterations()[0].note
    assert "1 valid design" in note and "1 answer restating an earlier design (sent back to the model)" in note


def test_the_notes_count_queries_valid_designs_and_writer_failures(tmp_path):
    def answer(role: str, prompt: str, n: int) -> str | None:
        if role == "optimize" and idea_asked(prompt) == 1:
            return f"```python\n{src('wrong', invalid='wrong')}{WRONG_BY}```"
        if role == "optimize" and idea_asked(prompt) == 2:
            raise ModelHTTPError(400, "scripted", body="malformed request")
        return None

    script = Script(ideas=3, answer=answer)
    loop, store, _ = make_pike_loop(tmp_path, "pike-b", script, max_queries=12,
                                    settings={"num_branches": 3, "max_fix_attempts": 1}, iterations=1)
    asyncio.run(loop.run())
    it = store.iterations()[0]
    charged = sum(c.requests for c in store.agent_calls() if c.role != "brainstorm")
    made = [v for v in loop.session.views() if v.id in it.design_ids]
    assert charged == 3 and sum(v.status == "valid" for v in made) == 2
    assert it.note.startswith("brainstorm: 1 query, 3 distinct ideas; phase 0: 3 queries, 2 valid designs, "
                              "1 fix round, 1 writer failure")
    assert "malformed request" in it.note or "writer failure" in it.note
