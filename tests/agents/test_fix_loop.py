"""The shared fix-until-valid loop, driven by a scripted writer (no model): the prompts a
policy makes from each failure's kind and details, and every way the loop stops."""

from __future__ import annotations

import asyncio

from fakes_search import ScriptedPolicy, make_loop, src

from stratagem.agents.fix_loop import FixLimits, Written, fix_until_valid

FIVE = FixLimits(5)


def drive(tmp_path, sources, limits=FIVE, **search):  # type: ignore[no-untyped-def]
    """Run the loop inside a real Session (the search loop over the fake evaluator)."""
    prompts: list[str] = []
    out = {}

    async def write(prompt: str, tokens_left: int | None) -> Written:
        prompts.append(prompt)
        if not sources:
            return Written(None, 10, "timeout", "the model did not answer")
        return Written(sources.pop(0), 100)

    def next_prompt(fb, attempts):  # type: ignore[no-untyped-def]
        if fb.kind == "wrong_output":
            return f"wrong output (max diff {fb.max_abs_err}): {fb.report}"
        return f"{fb.kind}: {fb.error_tail or fb.report}"

    class Fixing(ScriptedPolicy):
        async def iterate(self, state, session):  # type: ignore[no-untyped-def]
            out["res"] = await fix_until_valid(session, "fixer-1", prompt="write it", write=write,
                                               next_prompt=next_prompt, limits=limits, strategy="fix",
                                               tags={"phase": 0})
            return await super().iterate(state, session)

    loop, store, _ = make_loop(tmp_path, Fixing([[]]), iterations=1, **search)
    asyncio.run(loop.run())
    return out["res"], prompts, store


def test_fixes_until_valid_with_prompts_made_from_each_failure(tmp_path) -> None:
    res, prompts, store = drive(tmp_path, [src("a", invalid="off by one"), src("b", 0.5)])
    assert res.ok and res.attempts == 2 and len(res.design_ids) == 2 and res.tokens == 200
    assert prompts[0] == "write it" and prompts[1].startswith("wrong output") and "off by one" in prompts[1]
    assert res.feedback is not None and res.feedback.speedup == 2.0
    assert all(t == {"phase": 0} for t in store.tags().values()) and len(store.tags()) == 2
    authors = {d.provenance["author"] for d in store.designs()}
    assert authors == {"fixer-1"}


def test_stops_after_max_attempts_on_a_writer_failure_and_on_tokens(tmp_path) -> None:
    res, _, _ = drive(tmp_path / "a", [src(str(i), invalid="no") for i in range(5)], FixLimits(3))
    assert not res.ok and res.attempts == 3 and "after 3 evaluations" in res.reason
    res, _, _ = drive(tmp_path / "b", [src("x", invalid="no")])
    assert not res.ok and res.failed_turn is not None and res.failed_turn.error_kind == "timeout"
    assert res.error_kinds == ("timeout",) and res.attempts == 1
    res, _, _ = drive(tmp_path / "c", [src(str(i), invalid="no") for i in range(5)], FixLimits(5, token_limit=250))
    assert not res.ok and res.attempts == 3 and "token limit" in res.reason


def test_a_design_the_busy_machine_could_not_time_ends_the_loop(tmp_path) -> None:
    """Every check passed and only the timing waited for a quiet machine: there is nothing for
    the writer to fix (the run times it again); the loop ends instead of asking for a fix."""
    res, prompts, _ = drive(tmp_path, [src("a", 0.5) + "\n# busy\n", src("b", 0.5)])
    assert res.ok and res.attempts == 1 and len(prompts) == 1, (res, prompts)
    assert res.feedback is not None and res.feedback.status == "busy"
