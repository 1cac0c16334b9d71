"""The writer seam: a role routed to another backend (here the script backend) writes through
it, every other role keeps its model (the pydantic-ai path, unchanged), and both are recorded
and charged as queries."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from agent_fakes import ScriptWriter, SleepRecorder, agents_cfg, runtime
from test_agent_calls import flaky

from stratagem.agents.pike import PikeAgents, Tickets
from stratagem.agents.writers import WriterRoutes, writer_for
from stratagem.domains.pytorch.problem import load_problem

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = load_problem(ROOT / "tests/fixtures/problem_relu.py")


def test_a_routed_role_writes_through_its_backend_and_the_others_keep_their_model():
    model, calls = flaky([], answer="```python\nclass ModelNew: pass\n```")
    script = ScriptWriter(["class ModelNew:  # fixed\n    pass\n", None])
    rt = runtime({"default": model}, agents_cfg(), sleep=SleepRecorder())
    rt = replace(rt, writers=WriterRoutes(script, frozenset({"fix"})))
    recorded = []
    agents = PikeAgents(rt.recording(recorded.append), problem=PROBLEM, domain="pytorch")
    t = Tickets(3)
    w1 = asyncio.run(agents.write("optimize", "optimize it", t))
    w2 = asyncio.run(agents.write("fix", "fix it", t, worker="p0/s1", current="class ModelNew: broken\n"))
    w3 = asyncio.run(agents.write("fix", "fix it again", t))
    assert w1.source == "class ModelNew: pass\n" and calls[0] == 1  # the model answered optimize
    assert w2.source == "class ModelNew:  # fixed\n    pass\n"
    assert w3.source is None and w3.error_kind == "no_output"  # a script that writes nothing: a failed call
    req = script.requests[0]
    assert (req.role, req.worker, req.prompt) == ("fix", "p0/s1", "fix it")
    assert req.files == {"candidate.py": "class ModelNew: broken\n"} and req.instructions  # the fix role's own
    assert [(c.role, c.model, c.ok) for c in recorded] == [("optimize", recorded[0].model, True), ("fix", "script", True),
                                                            ("fix", "script", False)]
    assert t.taken == 3  # every call, whichever backend, took one of the phase's queries
    w4 = asyncio.run(agents.write("fix", "no ticket left", t))
    assert w4.error_kind == "budget" and len(script.requests) == 2


def test_without_routes_every_role_keeps_its_model():
    sentinel = ScriptWriter([])
    assert writer_for(None, "implementor", sentinel) is sentinel
    other = ScriptWriter(["x"])
    routes = WriterRoutes(other, frozenset({"implementor"}))
    assert writer_for(routes, "implementor", sentinel) is other and writer_for(routes, "fix", sentinel) is sentinel


def test_the_runs_budget_admits_every_backends_call_the_model_and_the_script_alike():
    """One query left in the run: the model's request takes it; the script's call is then
    refused before it is made (no call recorded), as a model's request would be."""
    from stratagem.config import SearchConfig
    from stratagem.search.budget import Budgets, Spend

    model, calls = flaky([], answer="```python\nclass ModelNew: pass\n```")
    script = ScriptWriter(["class ModelNew:  # fixed\n    pass\n"])
    budgets = Budgets(SearchConfig(max_queries=1), Spend())
    recorded = []

    def record(call):  # type: ignore[no-untyped-def]
        recorded.append(call)
        budgets.spend.add_call(call)

    rt = replace(runtime({"default": model}, agents_cfg(), sleep=SleepRecorder()),
                 writers=WriterRoutes(script, frozenset({"fix"})))
    agents = PikeAgents(rt.recording(record, budgets.meter), problem=PROBLEM, domain="pytorch")
    t = Tickets(5)
    assert asyncio.run(agents.write("optimize", "optimize it", t)).source == "class ModelNew: pass\n"
    w = asyncio.run(agents.write("fix", "fix it", t))
    assert w.error_kind == "budget" and "max_queries (1 of 1)" in (w.error or "")
    w = asyncio.run(agents.write("optimize", "again", t))
    assert w.error_kind == "budget" and calls[0] == 1  # the model was not asked
    assert not script.requests and [c.role for c in recorded] == ["optimize"]
    assert budgets.spend.queries == 1
