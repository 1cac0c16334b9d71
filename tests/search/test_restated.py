"""A design that only restates an evaluated one is linked to its verdict, not evaluated again;
the Implementor is told so and writes something different."""

from __future__ import annotations

import asyncio

from fakes import ScriptedPolicy, src
from test_loop import make_loop


def test_a_restatement_is_linked_to_the_earlier_verdict_without_an_evaluation(tmp_path):
    a = src("a", 0.5)
    restated = "# a comment the first did not have\n" + a.replace("class ModelNew: pass", "class ModelNew:\n    pass")
    policy = ScriptedPolicy([[a], [restated, src("b", 0.8)]])
    loop, store, ev = make_loop(tmp_path, policy, iterations=2)
    asyncio.run(loop.run())
    assert len(ev.calls) == 2  # a and b: the restatement was not evaluated
    assert len(store.designs()) == 2 and len(store.evaluations()) == 2
    first = store.designs()[0].id
    assert first in store.iterations()[1].design_ids  # the iteration lists the design it restated


def test_the_session_says_which_design_it_restates(tmp_path):
    a = src("a", 0.5)
    loop, store, ev = make_loop(tmp_path, ScriptedPolicy([]), iterations=1)

    async def go():
        first = await loop.session.evaluate(a, strategy="innovate", author="x")
        again = await loop.session.evaluate("\n\n" + a, strategy="refine", author="y", tags={"seen": 1})
        same = await loop.session.evaluate(a, strategy="refine", author="z")
        return first, again, same

    first, again, same = asyncio.run(go())
    assert first.duplicate_of is None and not first.reused
    assert again.duplicate_of == first.design_id == again.design_id and again.reused
    assert "only restates design" in again.report and again.status == first.status
    assert same.duplicate_of == first.design_id  # the very same files: a restatement too
    assert store.tags(first.design_id)[first.design_id] == {"seen": 1} and len(ev.calls) == 1
