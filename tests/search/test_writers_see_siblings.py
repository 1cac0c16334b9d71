"""Issue 59, round four's last items, on scripted models (pydantic-ai `FunctionModel`) and the
fake evaluator: the attempts asked at once see each other (in flight, not yet measured) and a
slot written after its sibling finished sees its result; the Error-Fixing prompts carry the
run's block; directions tried without a gain are not recycled: a fresh brainstorm, told what
each direction measured, brings new ones, and a slot still without one is asked to brainstorm
its own."""

from __future__ import annotations

import asyncio
import re

from fakes import src
from pike_fakes import Script, idea_asked, make_pike_loop

from stratagem.context import pike as prompts
from stratagem.context.render import ProblemBrief
from stratagem.context.templates import short_id
from stratagem.core.search import ranked

IN_FLIGHT = "Attempts asked beside yours, in flight (not measured yet)"
RUN = "# What the whole run has found so far"


def brief_of(loop) -> ProblemBrief:
    return loop.session.policy.brief(loop.session.state(1))


def in_flight(prompt: str) -> str:
    """The prompt's in-flight list ('' when it has none)."""
    if IN_FLIGHT not in prompt:
        return ""
    return prompt.split(IN_FLIGHT)[1].split("\n\n")[0]


def test_a_batch_s_first_queries_see_what_their_siblings_attempt(tmp_path):
    script = Script()
    loop, store, _ = make_pike_loop(tmp_path, "pike-o", script, max_queries=12,
                                    settings={"parallel_evaluations": 3, "max_fix_attempts": 1})
    asyncio.run(loop.run())
    children = store.policy_state("pike-o/batch/0")["children"]
    firsts = [p for r, p in script.calls if r != "fix" and "This is batch 1;" in p]
    assert len(firsts) == 3
    for prompt in firsts:
        own = re.search(r"following direction: (.*)", prompt).group(1)
        listed = in_flight(prompt)
        others = [c for c in children if c["direction"] != own]
        assert len(others) == 2  # the batch's directions are distinct
        for c in others:  # each sibling's direction, marked as in flight, and who asks it
            assert f"- {c['direction']}: b0/c{c['child']} (initial)" in listed
        assert own not in listed
        # the queries in flight are counted in the budget
        assert "queries: 0 of 12 used before this batch, 3 asked at once now (this one among them)" in prompt


def test_pike_b_phase_zero_prompts_list_the_other_ideas_and_the_paper_mode_none(tmp_path):
    script = Script(ideas=3)
    loop, _, _ = make_pike_loop(tmp_path, "pike-b", script, max_queries=4,
                                settings={"num_branches": 3, "max_fix_attempts": 0})
    asyncio.run(loop.run())
    phase0 = [p for r, p in script.calls if r == "optimize"]
    assert len(phase0) == 3
    # each prompt's own slot, read from the prompt: the three are asked at once, and reach the
    # scripted model in whatever order its threads run
    own = [idea_asked(p) for p in phase0]
    assert sorted(own, key=str) == [0, 1, 2]
    for k, prompt in zip(own, phase0, strict=True):
        assert all((f"- idea number {j}: p0/s{j} (initial)" in in_flight(prompt)) == (j != k) for j in range(3))
    paper = Script(ideas=3)
    loop, _, _ = make_pike_loop(tmp_path / "paper", "pike-b", paper, max_queries=4,
                                settings={"num_branches": 3, "max_fix_attempts": 0, "distinct_directions": False})
    asyncio.run(loop.run())
    assert not any(IN_FLIGHT in p for _, p in paper.calls)  # the paper's identical prompts


def test_a_slot_that_starts_after_its_sibling_ended_sees_its_result_not_its_flight(tmp_path):
    # 3 queries left for two children with one fix each: the second waits for the first's
    # tickets, so it is written after the first was measured
    script = Script()
    loop, _, _ = make_pike_loop(tmp_path, "pike-o", script, max_queries=3,
                                settings={"parallel_evaluations": 2, "max_fix_attempts": 1})
    asyncio.run(loop.run())
    first, second = [p for r, p in script.calls if r != "fix"][:2]
    assert in_flight(first).count("b0/c") == 1  # the second child, asked in the same batch
    [done] = [v for v in loop.session.views() if v.tags.get("slot b0/c0")]
    run = second.split(RUN)[1]
    assert f"- `{short_id(done.id)}` (initial: " in run and "valid, 1.05x" in run  # its result
    assert IN_FLIGHT not in second  # nothing is in flight any more


def test_error_fixing_prompts_carry_the_run_s_block_compact(tmp_path):
    # the fourth query (a child of batch 2) answers a wrong candidate: its fix prompt shows the
    # run's best so far and its siblings
    script = Script(bad=lambda n: n == 4)
    loop, _, _ = make_pike_loop(tmp_path, "pike-o", script, max_queries=9,
                                settings={"parallel_evaluations": 3, "max_fix_attempts": 1})
    asyncio.run(loop.run())
    [(n, fix)] = [(n, p) for n, (r, p) in enumerate(script.calls) if r == "fix"]
    views = loop.session.views()
    before = ranked([v for v in views if v.iteration == 1])[0]
    assert fix.index(RUN) < fix.index("Fix the correctness issue")  # the run as context, the fix asked last
    run = fix.split(RUN)[1]
    assert f"- `{short_id(before.id)}` (initial: " in run and f"{before.speedup:.2f}x" in run
    assert "shown nowhere else in this prompt; its code" not in run  # compact: no third program
    assert "Your task is still the fix asked below" in run
    [mine] = {k.removeprefix("slot ") for v in views if v.status == "invalid" for k in v.tags if k.startswith("slot")}
    for key in {"b1/c0", "b1/c1", "b1/c2"} - {mine}:  # each sibling is in flight, or its result is shown
        ids = [short_id(v.id) for v in views if v.tags.get(f"slot {key}")]
        assert key in in_flight(fix) or any(f"`{i}`" in run for i in ids)
    assert mine not in in_flight(fix)


def even(role: str, prompt: str, n: int) -> str | None:
    """Every code answer runs as fast as the original: each direction it takes measures even."""
    return None if role == "brainstorm" else f"```python\n{src(f'{role}-{n}', 1.0)}```"


def test_spent_directions_are_not_recycled_a_fresh_brainstorm_brings_new_ones(tmp_path):
    script = Script(ideas=10, answer=even)
    loop, store, _ = make_pike_loop(tmp_path, "pike-o", script, max_queries=28,
                                    settings={"parallel_evaluations": 6, "num_islands": 1, "max_fix_attempts": 1})
    asyncio.run(loop.run())
    plans = [store.policy_state(f"pike-o/batch/{b}")["children"] for b in range(len(store.iterations()))]
    generic = [c["direction"] for c in plans[0]]
    assert all(generic) and len(set(generic)) == 6
    untried = [d for d in prompts.directions(brief_of(loop)) if d not in generic]
    assert len(untried) < 6  # batch 1 has fewer untried directions than children
    brainstorms = [p for r, p in script.calls if r == "brainstorm"]
    told = brainstorms[0].split("The run has already taken these directions; the measurements say:")[1]
    assert all(f'- "{d[:60]}' in told for d in generic) and "no clear gain or loss" in told
    assert f"at most\n{6 - len(untried)} diverse tasks" in brainstorms[0]  # one for each child left without
    assert "Propose new directions only" in told
    # batch 1: the untried generic directions, then the new ones; none that measured even again
    assert [c["direction"] for c in plans[1]] == [*untried, *(f"idea number {k}" for k in range(6 - len(untried)))]
    assert f"fresh brainstorm: {6 - len(untried)} new directions" in store.iterations()[1].note
    handed = [c["direction"] for plan in plans for c in plan if c["direction"]]
    assert len(handed) == len(set(handed))  # every direction measured even: none handed out twice
    # once no brainstorm is affordable (or it brings nothing new), a slot left without a
    # direction is asked to brainstorm its own, told what each known one measured
    spent = [b for b, plan in enumerate(plans) if any(c.get("spent") for c in plan)]
    assert spent and all(not c["direction"] for b in spent[1:] for c in plans[b])
    asks = [p for r, p in script.calls if r in ("mutate", "crossover") and f"This is batch {spent[-1] + 1};" in p]
    assert asks and all("No direction is given to you" in p and '- "idea number 0": no clear gain or loss' in p
                        for p in asks)
    assert len(brainstorms) == len(set(brainstorms)) <= len(plans)  # never the same request twice
