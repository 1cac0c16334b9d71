"""Issue 59: what PIKE's writers are shown, on scripted models (pydantic-ai `FunctionModel`) and
the fake evaluator: the whole run's best designs and the attempts made since the starting design
in every code prompt (whatever its island or branch), directions that follow the evidence (one
whose designs lost is never handed out again), the words of the budget, and labels that say
how each design was made."""

from __future__ import annotations

import asyncio
import re

from fakes import src
from pike_fakes import Script, make_pike_loop

from stratagem.context.templates import short_id
from stratagem.core.search import DesignView, ranked

STEP = re.compile(r"This is (?:batch|phase) (\d+)")


def code_prompts(script: Script) -> list[tuple[int, str]]:
    """(step shown, prompt) of every first query of a slot after the first step (fixes apart)."""
    out = []
    for role, prompt in script.calls:
        m = STEP.search(prompt)
        if role in ("mutate", "crossover", "optimize") and m and int(m.group(1)) > 1:
            out.append((int(m.group(1)), prompt))
    return out


def best_shown(prompt: str, views) -> DesignView:
    """The design a prompt names first among the run's best."""
    run = prompt.split("# What the whole run has found so far")[1]
    first = re.search(r"ranked by their paired ratio\):\n- `([0-9a-f]+)`", run)
    assert first, "the prompt shows no best design"
    return next(v for v in views if v.id.startswith(first.group(1)))


def test_every_pike_o_prompt_shows_the_run_s_best_and_the_attempts_since_its_parent(tmp_path):
    script = Script(bad=lambda n: n % 5 == 0)
    loop, store, _ = make_pike_loop(tmp_path, "pike-o", script, max_queries=24,
                                    settings={"parallel_evaluations": 3, "num_islands": 3, "max_fix_attempts": 1})
    asyncio.run(loop.run())
    views = loop.session.views()
    later = code_prompts(script)
    assert len(later) >= 6
    for step, prompt in later:
        before = [v for v in views if v.iteration is not None and v.iteration < step]
        best = ranked(before)[0]
        run = prompt.split("# What the whole run has found so far")[1]
        assert f"`{short_id(best.id)}`" in run  # the run's best, whatever the child's island
        assert "(none yet)" not in prompt  # top and inspiration programs come from the run when an island has none
        # every attempt of the previous batch (other islands' and the parent's siblings: a slot's
        # first query and its fix) is in the prompt
        slots: dict[str, set[str]] = {}
        for v in before:
            for k in v.tags:
                if k.startswith(f"slot b{step - 2}/"):
                    slots.setdefault(k, set()).add(short_id(v.id))
        assert slots and all(any(i in prompt for i in ids) for ids in slots.values())
    assert any("Why your starting design was chosen: exploitation" in p or
               "Why your starting design was chosen: exploration" in p for _, p in later)


def test_pike_b_improve_prompts_show_the_best_of_other_branches(tmp_path):
    script = Script(ideas=3)
    loop, _, _ = make_pike_loop(tmp_path, "pike-b", script, max_queries=30,
                                settings={"num_branches": 3, "queries_per_phase": 4, "top_k": 3})
    asyncio.run(loop.run())
    views = loop.session.views()
    later = code_prompts(script)
    assert later
    for step, prompt in later:
        best = ranked([v for v in views if v.iteration is not None and v.iteration < step])[0]
        shown = best_shown(prompt, views)  # the run's best when the prompt was written: this one or newer
        assert shown.speedup is not None and best.speedup is not None and shown.speedup >= best.speedup
        if f"previously ({shown.speedup_text()}" not in prompt:  # a weaker seed says why it was drawn
            assert "Why your starting design was chosen: it ranks" in prompt and "It is not the run's best" in prompt


def test_a_direction_whose_designs_lost_is_never_handed_out_again(tmp_path):
    """The fake model answers "fuse more" with a slower program than its parent and every other
    direction with a faster one: after the first loss, no plan hands "fuse more" out, the prompts
    name it as contradicted, and the directions handed out say why."""
    def answer(role: str, prompt: str, n: int) -> str | None:
        m = re.search(r"following direction: (.*)", prompt)
        parent = re.search(r"runtime_ms=([0-9.]+)", prompt.split("# Current program")[-1]
                           if "# Current program" in prompt else prompt.split("Your current program")[-1])
        base = float(parent.group(1)) if parent and "Your current program (the original" not in prompt else 1.0
        if m is None or role == "fix":
            return None
        slower = m.group(1).startswith("fuse more")
        return f"```python\n{src(f'{role}-{n}', round(base * (1.6 if slower else 0.8), 4))}```"

    script = Script(answer=answer)
    loop, store, _ = make_pike_loop(tmp_path, "pike-o", script, max_queries=30,
                                    settings={"parallel_evaluations": 4, "num_islands": 2, "max_fix_attempts": 1})
    asyncio.run(loop.run())
    batches = [store.policy_state(f"pike-o/batch/{b}") for b in range(len(store.iterations()))]
    fuse = [b for b, plan in enumerate(batches) for c in plan["children"]
            if (c.get("direction") or "").startswith("fuse more")]
    assert fuse and len(set(fuse)) == 1  # asked in one batch, never after its designs lost
    after = [p for r, p in script.calls if r in ("mutate", "crossover") and STEP.search(p)
             and int(STEP.search(p).group(1)) > fuse[0] + 1]
    assert after and all("Directions the measurements contradict in this run" in p and '"fuse more' in p
                         for p in after)
    assert all("Why this direction:" in p for p in after if "following direction:" in p)
    assert any("Why this direction: it produced gains in this run" in p for p in after)


def test_the_budget_counts_the_queries_in_flight_and_no_batch_limit_beyond_the_budget(tmp_path):
    script = Script()
    loop, _, _ = make_pike_loop(tmp_path, "pike-o", script, max_queries=12,
                                settings={"parallel_evaluations": 2, "max_fix_attempts": 1})
    asyncio.run(loop.run())
    first = [p for r, p in script.calls if r != "fix" and "This is batch 2;" in p]
    assert len(first) == 2
    # two prompts asked at once do not both say "2 of 12": the other one is counted in flight
    assert all("queries: 2 of 12 used before this batch, 2 asked at once now (this one among them), 8 left "
               "after them" in p for p in first)
    assert all("the budgets below end the run" in p for _, p in script.calls if "This is batch" in p)
    assert not any("of 100000" in p for _, p in script.calls)


def test_each_design_s_label_says_how_it_was_made(tmp_path):
    script = Script(bad=lambda n: n in (2, 6))
    loop, store, _ = make_pike_loop(tmp_path, "pike-o", script, max_queries=16,
                                    settings={"parallel_evaluations": 2, "max_fix_attempts": 1})
    asyncio.run(loop.run())
    views = loop.session.views()
    first = [v for v in views if v.iteration == 1]
    assert {v.strategy for v in first} == {"initial", "fix"}  # the first batch: no program to start from
    assert all(v.strategy == "fix" for v in views if any(t.get("round") for k, t in v.tags.items()
                                                         if k.startswith("slot ")))
    later = {v.strategy for v in views if (v.iteration or 0) > 1}
    assert later <= {"crossover", "mutation", "fix"} and "crossover" in later
    plans = [i.plan["strategy"] for i in store.iterations()]
    assert plans[0] == "2 initial" and all("crossover" in p or "mutation" in p for p in plans[1:])


TEMPLATE = """\
# stratagem: param MS = choice(0.5, 0.8, 1.25)
# stratagem: param MODE = choice("ok", "invalid: wrong sum")
class ModelNew: pass
# runtime_ms={{MS}}
# {{MODE}}
_MARKS = "{{MS}} {{MODE}}"
"""


def test_a_tuned_template_s_points_reach_later_prompts_as_a_table(tmp_path):
    def answer(role: str, prompt: str, n: int) -> str | None:
        return f"```python\n{TEMPLATE}```" if n == 2 else None  # phase 0's first query answers a template

    script = Script(ideas=1, answer=answer)
    loop, _, _ = make_pike_loop(tmp_path, "pike-b", script, max_queries=8, tune_evaluations=4,
                                settings={"num_branches": 1, "queries_per_phase": 1, "max_fix_attempts": 1})
    asyncio.run(loop.run())
    points = [v for v in loop.session.views() if v.strategy == "tuned point"]
    assert len(points) == 4
    improve = [p for r, p in script.calls if r == "optimize" and "working solution previously" in p]
    assert improve
    table = improve[0].split("every tuned point of its template (4):")[1]
    assert all(f"`{short_id(v.id)}`" in table for v in points)  # every point, its verdict and its ratio
    assert "| invalid |" in table and "| valid |" in table


def test_every_writer_prompt_fixes_included_shows_the_run_s_best_once_it_exists(tmp_path):
    """Item 1 on whole scripted runs of both policies, with failing candidates: every code and
    fix prompt of a later step names the run's best so far (or a newer, better one) first."""
    for policy, settings in (("pike-o", {"parallel_evaluations": 3, "num_islands": 3, "max_fix_attempts": 1}),
                             ("pike-b", {"num_branches": 3, "queries_per_phase": 3, "top_k": 2,
                                         "max_fix_attempts": 1})):
        script = Script(ideas=3, bad=lambda n: n % 3 == 0)
        loop, _, _ = make_pike_loop(tmp_path / policy, policy, script, max_queries=24, settings=settings)
        asyncio.run(loop.run())
        views = loop.session.views()
        later = [(int(m.group(1)), p) for r, p in script.calls if r != "brainstorm"
                 and (m := STEP.search(p)) and int(m.group(1)) > 1]
        assert sum(STEP.search(p) is not None and "Fix the correctness issue" in p for _, p in later) >= 2
        for step, prompt in later:
            best = ranked([v for v in views if v.iteration is not None and v.iteration < step])[0]
            shown = best_shown(prompt, views)
            assert shown.speedup is not None and best.speedup is not None and shown.speedup >= best.speedup
        assert not any(" of 100000" in p or "1 threads" in p for _, p in script.calls)
