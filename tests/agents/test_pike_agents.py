"""PIKE's one-request agents: a transport retry is made only while the phase still holds a
query (so retries cannot take a phase past what it reserved), and the charge equals the
queries taken; every call is recorded with its role."""

from __future__ import annotations

import asyncio

from agent_fakes import SleepRecorder, agents_cfg, runtime
from pydantic_ai.exceptions import ModelHTTPError
from test_agent_calls import flaky

from stratagem.agents.pike import PikeAgents, Tickets


def agents_with(model, recorded):
    rt = runtime({"default": model}, agents_cfg(backoff_s=1.0, max_retries=4), sleep=SleepRecorder())
    return PikeAgents(rt.recording(recorded.append))


def test_a_retry_needs_a_ticket_of_its_own():
    model, calls = flaky([ModelHTTPError(503, "flaky")], answer="```python\nclass ModelNew: pass\n```")
    recorded = []
    t = Tickets(1)
    w = asyncio.run(agents_with(model, recorded).write("fix", "prompt", t))
    assert w.source is None and w.error_kind == "server" and calls[0] == 1  # no retry: no ticket left
    assert t.taken == 1 and sum(c.requests for c in recorded) <= t.taken


def test_with_tickets_left_the_retry_is_made_and_charged():
    model, calls = flaky([ModelHTTPError(503, "flaky")], answer="```python\nclass ModelNew: pass\n```")
    recorded = []
    t = Tickets(5)
    w = asyncio.run(agents_with(model, recorded).write("optimize", "prompt", t))
    assert w.source == "class ModelNew: pass\n" and calls[0] == 2
    assert t.taken == 2 and [c.requests for c in recorded] == [2] and recorded[0].role == "optimize"


def test_no_ticket_no_request():
    model, calls = flaky([], answer="x")
    recorded = []
    t = Tickets(0)
    a = asyncio.run(agents_with(model, recorded).ask("brainstorm", "prompt", t))
    assert a.text is None and a.error_kind == "budget" and calls[0] == 0 and recorded == []
