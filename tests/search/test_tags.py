"""A policy's own metadata per design (`Session.tag`): persisted in the run database, in the
design's view, in `show --json`, and back after a resume (a new loop over the same store)."""

from __future__ import annotations

import asyncio
import json

import pytest
from fakes import FakeEvaluator, ScriptedPolicy, src
from test_loop import make_loop

from stratagem.cli import main
from stratagem.config import load_config
from stratagem.core.search import SearchState, Session
from stratagem.errors import StoreError
from stratagem.search.loop import SearchLoop
from stratagem.search.session import RunSession


class Islands(ScriptedPolicy):
    """Tags every design with an island when it is made, and moves the first one later."""

    async def iterate(self, state: SearchState, session: Session):  # type: ignore[no-untyped-def]
        if state.iteration == 1:
            ids = [(await session.evaluate(s, strategy="explore", tags={"island": i % 2, "archive": ["elite"]})).design_id
                   for i, s in enumerate(self.script[0])]
            return _result(ids)
        first = state.designs[0]
        assert first.tags == {"island": 0, "archive": ["elite"]}  # read back from the store
        session.tag(first.id, island=1)  # migration: a key set again is replaced
        return _result([], exhausted=True)


def _result(ids, exhausted=False):  # type: ignore[no-untyped-def]
    from stratagem.core.search import IterationResult, Plan

    return IterationResult(plan=Plan(strategy="explore"), design_ids=tuple(ids), exhausted=exhausted)


def test_tags_persist_are_shown_and_survive_a_resume(tmp_path, capsys) -> None:
    policy = Islands([[src("a", 0.5), src("b", 0.7)]])
    loop, store, ev = make_loop(tmp_path, policy, iterations=1)
    asyncio.run(loop.run())
    views = {v.source: v for v in loop.session.views()}
    assert views[src("a", 0.5)].tags == {"island": 0, "archive": ["elite"]}
    assert views[src("b", 0.7)].tags["island"] == 1
    # a resumed run: a fresh loop over the same database (its views rebuilt from the store)
    cfg = load_config(None, {"search": {"patience": 5, "iterations": 2}})
    again = SearchLoop(RunSession(cfg, loop.problem, store, FakeEvaluator(), policy))  # type: ignore[arg-type]
    asyncio.run(again.run())
    first = again.session.views()[0]
    assert first.tags == {"island": 1, "archive": ["elite"]}
    assert main(["show", str(store.run_dir), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert {d["id"]: d["tags"] for d in shown["all_designs"]}[first.id] == {"island": 1, "archive": ["elite"]}
    with pytest.raises(StoreError, match="not stored"):
        store.set_tags("f" * 64, {"island": 3})
    with pytest.raises(StoreError, match="JSON"):
        store.set_tags(first.id, {"island": object()})


def test_recipes_read_what_was_tried_from_tags_or_from_an_older_runs_authors() -> None:
    from stratagem.core.search import DesignView
    from stratagem.domains.pytorch.recipes.policy import recipes_of

    tagged = DesignView(id="a", source="", status="valid", author="recipe:compile", tags={"recipes": ["compile"]})
    older = DesignView(id="b", source="", status="valid", author="recipe:inference_mode+compile")
    other = DesignView(id="c", source="", status="valid", author="implementor-1")
    assert recipes_of(tagged) == ("compile",)
    assert recipes_of(older) == ("inference_mode", "compile")
    assert recipes_of(other) == ()
