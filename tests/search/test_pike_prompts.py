"""PIKE-B and PIKE-O never send the same prompt twice in a run, even to a deterministic model
(one whose answer is a function of the prompt alone): directions never repeat for a seed, the
improvement prompts show what earlier attempts found, PIKE-O's children see real designs, and
an answer that restates an earlier design goes back to the model."""

from __future__ import annotations

import asyncio
import hashlib

from fakes import src
from pike_fakes import Script, make_pike_loop


def deterministic(role: str, prompt: str, n: int) -> str | None:
    """The same prompt always gets the same program."""
    if role == "brainstorm":
        return None
    h = hashlib.sha256(prompt.encode()).hexdigest()[:10]
    return f"```python\n{src(f'{role}-{h}', round(0.3 + int(h[:4], 16) / 65536, 4))}```"


def assert_no_prompt_twice(script: Script) -> None:
    prompts = [p for _, p in script.calls]
    assert len(prompts) == len(set(prompts)), "a prompt was sent twice"


def test_pike_b_sends_no_prompt_twice_to_a_deterministic_model(tmp_path):
    script = Script(ideas=2, answer=deterministic)
    loop, store, _ = make_pike_loop(tmp_path, "pike-b", script, max_queries=30,
                                    settings={"num_branches": 3, "queries_per_phase": 4, "top_k": 2})
    asyncio.run(loop.run())
    assert len(store.iterations()) >= 3 and len(script.calls) >= 20
    assert_no_prompt_twice(script)
    plans = [store.policy_state(f"pike-b/phase/{p}") for p in range(len(store.iterations()))]
    pairs = [(s["parent"], s.get("direction") or s.get("idea")) for plan in plans for s in plan["slots"]
             if not s.get("spent")]  # a slot the known directions were spent for brainstorms its own
    assert len(pairs) == len(set(pairs))  # no (seed, direction) pair asked twice
    improve = [p for r, p in script.calls if r == "optimize" and "working solution previously" in p]
    assert any("What earlier attempts from this solution" in p for p in improve)
    assert not any("at the same time" in p for _, p in script.calls)


def test_a_restating_answer_goes_back_to_the_model(tmp_path):
    same = src("the-one", 0.5)

    def answer(role: str, prompt: str, n: int) -> str | None:
        if role == "optimize" and "Your answer restated" not in prompt:
            return f"```python\n{same}```"  # every first answer is one program
        return None

    script = Script(ideas=2, answer=answer)
    loop, store, ev = make_pike_loop(tmp_path, "pike-b", script, max_queries=8, iterations=1,
                                     settings={"num_branches": 2, "max_fix_attempts": 1})
    asyncio.run(loop.run())
    first = store.designs()[0].id
    back = [p for r, p in script.calls if r == "optimize" and "Your answer restated" in p]
    assert len(back) == 1 and f"design `{first[:8]}" in back[0]
    assert "Focus specifically on the following optimization task: idea number" in back[0]  # its own query
    note = store.iterations()[0].note
    assert "1 answer restating an earlier design (sent back to the model)" in note and "2 valid designs" in note
    assert_no_prompt_twice(script)


def test_pike_o_children_see_real_designs_and_fit_the_budget(tmp_path):
    script = Script(answer=deterministic)
    loop, store, _ = make_pike_loop(tmp_path, "pike-o", script, max_queries=14,
                                    settings={"parallel_evaluations": 20, "max_fix_attempts": 2})
    asyncio.run(loop.run())
    notes = [i.note for i in store.iterations()]
    assert "4 of 20 children (parallel_evaluations): 14 queries left fit 4" in notes[0]
    assert len(notes) >= 3  # the budget reaches later batches
    assert_no_prompt_twice(script)
    later = [p for r, p in script.calls if r == "crossover"]
    assert later and all("Current program" in p and "Fitness: the original program" not in p for p in later)
    assert all("(none yet)" not in p.split("## Inspiration programs")[0] for p in later)  # top programs shown
    crossed = [d for d in store.designs() if d.provenance.get("strategy") == "crossover"]
    assert crossed and all(len(d.parent_ids) >= 2 for d in crossed)  # the parent and what it was shown


def test_every_pike_code_prompt_states_the_budget_and_the_fix_reservation(tmp_path):
    for policy, settings in (("pike-b", {"num_branches": 2, "queries_per_phase": 2, "max_fix_attempts": 1}),
                             ("pike-o", {"parallel_evaluations": 2, "max_fix_attempts": 1})):
        script = Script(ideas=2, bad=lambda n: n == 2,  # the second query's answer is wrong: a fix follows
                        answer=lambda r, p, n: None if n == 2 else deterministic(r, p, n))
        loop, _, _ = make_pike_loop(tmp_path / policy, policy, script, max_queries=9, settings=settings)
        asyncio.run(loop.run())
        code = [p for r, p in script.calls if r != "brainstorm"]
        assert code and all("The run's budget" in p and "- queries: " in p and "of 9 used" in p for p in code)
        assert all("keeping 2 queries (1 fix rounds) for itself" in p for p in code)
        assert any(r == "fix" for r, _ in script.calls)  # fix prompts say it too
